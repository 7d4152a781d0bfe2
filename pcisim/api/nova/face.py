"""How the Nova face is served inside pcisim's WSGI application.

Its handlers take ``(api, context, req, **path_values)`` plus ``body``/``query`` where
they declare schemas (``pcisim.api.validation``, as pcisim's own handlers do); ``req``
is the ``NovaRequest``: the microversion asked for and the base URL links are made of.
Answers of the compute face carry the microversion used; errors anywhere under the
face's prefixes are Nova faults (``faults``).
"""

import dataclasses
import uuid

import flask
import microversion_parse

from pcisim.api import validation
from pcisim.api.nova import faults, microversion, schemas

COMPUTE_PREFIX = "/v2.1"
IMAGE_PREFIX = "/image"
IDENTITY_PREFIX = "/identity"
PREFIXES = (COMPUTE_PREFIX, IMAGE_PREFIX, IDENTITY_PREFIX)
# Routes answered without a token, as Nova and Keystone answer them: version
# documents, and the request for a token itself.
OPEN_PATHS = frozenset(
    {
        "/",
        COMPUTE_PREFIX,
        COMPUTE_PREFIX + "/",
        IMAGE_PREFIX,
        IDENTITY_PREFIX,
        IDENTITY_PREFIX + "/v3",
        IDENTITY_PREFIX + "/v3/auth/tokens",
    }
)


@dataclasses.dataclass(frozen=True)
class NovaRequest:
    """What a Nova handler reads of its request besides its body and query."""

    version: microversion_parse.Version
    url: str  # scheme://host:port, no trailing slash

    def link(self, path):
        return f"{self.url}{path}"

    def links(self, collection, identifier):
        """A compute resource's ``self`` and ``bookmark`` links, as Nova's views give
        them (``collection``: ``servers``, ``flavors``)."""
        return [
            {"rel": "self", "href": self.link(f"{COMPUTE_PREFIX}/{collection}/{identifier}")},
            self.bookmark(collection, identifier),
        ]

    def bookmark(self, collection, identifier):
        """The link to a resource that names no API version."""
        return {"rel": "bookmark", "href": self.link(f"/{collection}/{identifier}")}

    def at_least(self, text):
        return microversion.at_least(self.version, text)


@dataclasses.dataclass(frozen=True)
class Reply:
    """What a handler returns when its answer carries headers too."""

    body: dict
    headers: dict


def owns(path):
    """Whether ``path`` is the Nova face's (and so errors there are Nova faults)."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PREFIXES)


def is_open(path):
    return path.rstrip("/") in OPEN_PATHS or path in OPEN_PATHS


def error_response(error):
    """Errors as Nova writes them, or as Keystone does on the identity face."""
    if _under(flask.request.path, IDENTITY_PREFIX):
        return faults.identity_response(error)
    return faults.response(error)


def error_schema(path):
    return schemas.IDENTITY_ERROR if _under(path, IDENTITY_PREFIX) else schemas.FAULT


def _under(path, prefix):
    return path == prefix or path.startswith(prefix + "/")


def endpoint(api, handler):
    """The Flask view serving ``handler``."""
    declaration = validation.declared(handler)

    def view(**values):
        request = flask.request
        compute = owns_compute(request.path)
        version = microversion.requested(request.headers) if compute else microversion.MIN_VERSION
        req = NovaRequest(version, request.host_url.rstrip("/"))
        values = {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in values.items()}
        values.update(validation.request_arguments(declaration, request))
        body = handler(api, flask.g.context, req, **values)
        headers = {}
        if isinstance(body, Reply):
            body, headers = body.body, body.headers
        status = declaration.response.status
        answer = ("", status) if body is None else (flask.jsonify(body), status)
        response = flask.make_response(answer)
        response.headers.update(headers)
        if compute:
            response.headers.update(microversion.response_headers(version))
        return response

    return view


def owns_compute(path):
    return _under(path, COMPUTE_PREFIX)
