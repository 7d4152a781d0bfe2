"""The HTTP API as a WSGI application: one route table, thin handlers, JSON errors.

Handlers take ``(api, context, **path_values)``, and the request's ``body`` and
``query`` where they declare their schemas (``validation``), checked before the handler
runs; they return the body of the response they declare, answered with its status.
They read through objects and act through the compute API, so this process needs no
database: every call goes to the conductor.
"""

import dataclasses
import hmac
import time
import uuid

import flask
from oslo_log import log as logging
from oslo_middleware import healthcheck
from oslo_middleware import opts as middleware_opts
from werkzeug import exceptions as http_exceptions

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import telemetry, trace
from pcisim.api import errors, hypervisors, openapi, pci_devices, schemas, servers, validation
from pcisim.api.nova import face as nova_face
from pcisim.api.nova import identity as nova_identity
from pcisim.api.nova import routes as nova_routes

LOG = logging.getLogger(__name__)
ACTOR = "api"
REQUEST_ID_HEADER = "X-OpenStack-Request-ID"
AUTH_HEADER = "X-Auth-Token"
HEALTHCHECK_PATH = "/healthcheck"

ROUTES = (
    ("/servers", "POST", servers.create_server),
    ("/servers", "GET", servers.list_servers),
    ("/servers/<uuid:server_id>", "GET", servers.show_server),
    ("/servers/<uuid:server_id>", "DELETE", servers.delete_server),
    ("/hypervisors", "GET", hypervisors.list_hypervisors),
    ("/hypervisors/<int:node_id>", "GET", hypervisors.show_hypervisor),
    ("/hypervisors/<int:node_id>/pci-tree", "GET", hypervisors.pci_tree),
    ("/pci-devices", "GET", pci_devices.list_pci_devices),
    ("/pci-devices/<int:device_id>", "GET", pci_devices.show_pci_device),
)
# Nova's compute API, with its image and identity faces (``pcisim.api.nova``).
NOVA_ROUTES = nova_routes.ROUTES


@dataclasses.dataclass
class Api:
    """What handlers act through."""

    compute: object  # compute.api.API
    identity: object = None  # nova.identity.Issuer; create_app sets it


def create_app(api, auth_token=None, users=()):
    """The WSGI application; with ``auth_token``, every request (the OpenAPI document
    too, not version documents nor a request for a token) must carry it in
    ``X-Auth-Token`` or is answered 401 before anything runs. The identity face issues
    that token to ``users`` (``name:password`` entries)."""
    if api.identity is None:
        api = dataclasses.replace(api, identity=nova_identity.Issuer.from_config(auth_token, users))
    app = flask.Flask("pcisim.api")
    app.json.sort_keys = False
    app.config["MAX_CONTENT_LENGTH"] = schemas.MAX_BODY_BYTES
    for path, method, handler in ROUTES:
        app.add_url_rule(path, f"{method} {path}", _endpoint(api, handler), methods=[method])
    for path, method, handler in NOVA_ROUTES:
        view = nova_face.endpoint(api, handler)
        app.add_url_rule(path, f"{method} {path}", view, methods=[method], strict_slashes=False)
    document = openapi.document(
        ROUTES + NOVA_ROUTES,
        auth_header=AUTH_HEADER if auth_token else None,
        error_schema=error_schema,
        is_open=nova_face.is_open,
    )
    app.add_url_rule("/openapi.json", "openapi", lambda: document)
    app.register_error_handler(Exception, _error_response)
    app.before_request(_begin_request)
    if auth_token:
        app.before_request(_authenticator(auth_token))
    app.after_request(_end_request)
    app.teardown_request(_teardown_request)
    # NOTE: inside the healthcheck, so that a load balancer's probes make no spans.
    app.wsgi_app = _with_healthcheck(telemetry.traced(app.wsgi_app, pcisim_conf.CONF))
    return app


def _with_healthcheck(wsgi_app):
    """``wsgi_app`` with oslo.middleware's healthcheck at ``HEALTHCHECK_PATH``.

    NOTE: answered before the routes and the token check, as a load balancer asks:
    "OK", or 503 while a ``[healthcheck]`` backend (``disable_by_file``) says so, and no
    detail unless ``[healthcheck] detailed``. The healthcheck answers every request it
    is given (it is meant to be mounted at its path), so only its path goes to it.
    """
    # NOTE: a backend registers its options only when loaded; register them all first,
    # so that [healthcheck] of a configuration file (or a test's override) is read.
    for group, opts in middleware_opts.list_opts_healthcheck():
        pcisim_conf.CONF.register_opts(opts, group)
    check = healthcheck.Healthcheck(None, pcisim_conf.CONF)

    def dispatch(environ, start_response):
        if environ.get("PATH_INFO") == HEALTHCHECK_PATH:
            return check(environ, start_response)
        return wsgi_app(environ, start_response)

    return dispatch


def error_schema(path):
    """The schema of the error bodies answered at ``path``: each face has its own."""
    return nova_face.error_schema(path) if nova_face.owns(path) else schemas.ERROR


def _authenticator(auth_token):
    """A before-request check of ``X-Auth-Token`` against ``auth_token``, in constant
    time. Neither token is ever logged."""
    expected = auth_token.encode()

    def authenticate():
        if nova_face.is_open(flask.request.path):
            return None
        given = flask.request.headers.get(AUTH_HEADER)
        if given is None:
            return _unauthorized("auth.required", f"This API requires an {AUTH_HEADER} header.")
        # NOTE: werkzeug decodes header bytes as latin-1; this gives the bytes back.
        if not hmac.compare_digest(given.encode("latin-1"), expected):
            return _unauthorized("auth.invalid", f"The {AUTH_HEADER} header is not valid.")
        return None

    return authenticate


def _unauthorized(code, message):
    request = flask.request
    LOG.warning(
        "Refused %s %s from %s: %s", request.method, request.path, request.remote_addr, code
    )
    response = flask.jsonify(errors.body(code, message))
    response.status_code = 401
    response.headers["WWW-Authenticate"] = f'{AUTH_HEADER} realm="pcisim"'
    return response


def _begin_request():
    """Every request gets a context of its own, whose id the response carries, every
    message it causes is traced under and, while it is served, every line it logs
    carries (it is the serving thread's current context until teardown)."""
    flask.g.previous_context = pcisim_context.get_current()
    flask.g.context = pcisim_context.get_admin_context()
    flask.g.started = time.time(), time.perf_counter()
    flask.g.previous_actor = trace.set_actor(ACTOR)


def _end_request(response):
    context = flask.g.context
    response.headers[REQUEST_ID_HEADER] = context.request_id
    started, clock = flask.g.started
    request = flask.request
    LOG.info(
        "%s %s answered %s", request.method, request.full_path.rstrip("?"), response.status_code
    )
    trace.record(
        context,
        "client",
        ACTOR,
        "http",
        f"{request.method} {request.path}",
        started,
        time.perf_counter() - clock,
        "ok" if response.status_code < 400 else "error",
        status=response.status_code,
    )
    return response


def _teardown_request(error):
    """The serving thread acts for whom it did before (a test's own thread, say), and
    has the context it had before: the next request it serves does not log under this
    one's id."""
    trace.set_actor(flask.g.pop("previous_actor", None))
    pcisim_context.set_current(flask.g.pop("previous_context", None))


def _endpoint(api, handler):
    declaration = validation.declared(handler)

    def endpoint(**values):
        values = {
            name: str(value) if isinstance(value, uuid.UUID) else value
            for name, value in values.items()
        }
        values.update(validation.request_arguments(declaration, flask.request))
        body = handler(api, flask.g.context, **values)
        status = declaration.response.status
        return ("", status) if body is None else (flask.jsonify(body), status)

    return endpoint


def _error_response(error):
    if nova_face.owns(flask.request.path):
        return nova_face.error_response(error)
    if isinstance(error, errors.ApiError):
        return flask.jsonify(errors.body(error.code, error.message)), error.status
    if isinstance(error, http_exceptions.HTTPException):
        return _http_error(error)
    mapped = errors.for_exception(error)
    if mapped is not None:
        status, body = mapped
        return flask.jsonify(body), status
    LOG.exception("Unexpected error serving %s %s", flask.request.method, flask.request.path)
    return flask.jsonify(errors.body("internal", "An unexpected error occurred.")), 500


def _http_error(error):
    """werkzeug's error as a JSON one, with the headers it carries but its content type
    (a 405 names the methods allowed in ``Allow``, as RFC 9110 requires)."""
    headers = [(name, value) for name, value in error.get_headers() if name != "Content-Type"]
    body = errors.body(f"http.{error.code}", error.description)
    return flask.jsonify(body), error.code, headers
