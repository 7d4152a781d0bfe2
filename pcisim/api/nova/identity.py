"""A minimal Keystone v3 face, for the tools that insist on authenticating (Terraform,
clouds.yaml with a password): a version document and ``POST /identity/v3/auth/tokens``
answering ``X-Subject-Token`` and a catalog of the compute, image and identity
endpoints, all on this API.

With ``[api] auth_token`` set, a password must be a configured user's (``[api] users``)
and a token must be ``auth_token``; the token issued is ``auth_token``, the one every
request then carries. Without it, any credentials get a token, as no request needs one.
"""

import dataclasses
import datetime
import hmac
import uuid

from oslo_utils import timeutils

from pcisim import exception
from pcisim.api import validation
from pcisim.api.nova import face
from pcisim.api.nova import schemas as nova_schemas

SUBJECT_TOKEN_HEADER = "X-Subject-Token"
VERSION_ID = "v3.14"
PROJECT = {"id": "admin", "name": "admin", "domain": {"id": "default", "name": "Default"}}
DOMAIN = {"id": "default", "name": "Default"}
TOKEN_LIFETIME = datetime.timedelta(hours=12)


@dataclasses.dataclass(frozen=True)
class Issuer:
    """Who gets a token: ``users`` (name -> password) when ``auth_token`` is set."""

    auth_token: str | None = None
    users: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, auth_token, users):
        """From ``[api] users`` entries, ``name:password``; ``InvalidConfigValue``
        for one without its colon (the entry is not repeated: it holds a password)."""
        parsed = {}
        for number, entry in enumerate(users, 1):
            name, colon, password = entry.partition(":")
            if not colon or not name:
                raise exception.InvalidConfigValue(
                    option="[api] users", reason=f"entry {number} is not name:password"
                )
            parsed[name] = password
        return cls(auth_token, parsed)

    def issue(self, identity):
        """The token for ``identity`` (the body's ``auth.identity``), or
        ``AuthenticationFailed``."""
        if self.auth_token is None:
            return uuid.uuid4().hex
        methods = identity["methods"]
        if "password" in methods and self._password_matches(identity.get("password", {})):
            return self.auth_token
        if "token" in methods and _same(identity.get("token", {}).get("id", ""), self.auth_token):
            return self.auth_token
        raise exception.AuthenticationFailed()

    def _password_matches(self, password):
        user = password.get("user", {})
        expected = self.users.get(user.get("name", ""))
        return expected is not None and _same(user.get("password", ""), expected)


def _same(given, expected):
    return hmac.compare_digest(given.encode(), expected.encode())


def version(req):
    return {
        "id": VERSION_ID,
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": req.link(face.IDENTITY_PREFIX + "/v3/")}],
        "media-types": [
            {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
        ],
    }


@validation.response_body_schema(nova_schemas.IDENTITY_VERSIONS)
def list_identity_versions(api, context, req):
    """The identity API's version: v3."""
    return {"versions": {"values": [version(req)]}}


@validation.response_body_schema(nova_schemas.IDENTITY_VERSION)
def show_identity_version(api, context, req):
    """Identity API v3."""
    return {"version": version(req)}


@validation.schema(nova_schemas.TOKEN_CREATE)
@validation.error_statuses(**{"401": "wrong credentials"})
@validation.response_body_schema(nova_schemas.TOKEN, status=201)
def create_token(api, context, req, body):
    """A token (in ``X-Subject-Token``) with the catalog of this API's endpoints."""
    identity = body["auth"]["identity"]
    token = api.identity.issue(identity)
    now = timeutils.utcnow()
    user = identity.get("password", {}).get("user", {})
    name = user.get("name", "admin")
    scoped = "scope" in body["auth"]
    body = {
        "token": {
            "methods": identity["methods"],
            "user": {"id": name, "name": name, "domain": DOMAIN, "password_expires_at": None},
            "audit_ids": [uuid.uuid4().hex[:22]],
            "issued_at": _time(now),
            "expires_at": _time(now + TOKEN_LIFETIME),
            "roles": [{"id": "admin", "name": "admin"}],
            "catalog": _catalog(req),
            **({"project": PROJECT, "is_domain": False} if scoped else {}),
        }
    }
    return face.Reply(body, {SUBJECT_TOKEN_HEADER: token})


def _time(value):
    return value.strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def _catalog(req):
    return [
        _service(req, "compute", "nova", face.COMPUTE_PREFIX),
        _service(req, "image", "glance", face.IMAGE_PREFIX),
        _service(req, "identity", "keystone", face.IDENTITY_PREFIX + "/v3"),
    ]


def _service(req, service_type, name, prefix):
    return {
        "id": service_type,
        "type": service_type,
        "name": name,
        "endpoints": [
            {
                "id": f"{service_type}-{interface}",
                "interface": interface,
                "region": "RegionOne",
                "region_id": "RegionOne",
                "url": req.link(prefix),
            }
            for interface in ("public", "internal", "admin")
        ],
    }
