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
from pcisim.api.nova import faults, microversion

COMPUTE_PREFIX = "/v2.1"
IMAGE_PREFIX = "/image"
IDENTITY_PREFIX = "/identity"
PREFIXES = (COMPUTE_PREFIX, IMAGE_PREFIX, IDENTITY_PREFIX)
# Routes answered without a token, as Nova and Keystone answer them: version
# documents, and the request for a token itself.
OPEN_PATHS = frozenset({"/", COMPUTE_PREFIX, COMPUTE_PREFIX + "/", IMAGE_PREFIX, IDENTITY_PREFIX})


@dataclasses.dataclass(frozen=True)
class NovaRequest:
    """What a Nova handler reads of its request besides its body and query."""

    version: microversion_parse.Version
    url: str  # scheme://host:port, no trailing slash

    def link(self, path):
        return f"{self.url}{path}"

    def at_least(self, text):
        return microversion.at_least(self.version, text)


def owns(path):
    """Whether ``path`` is the Nova face's (and so errors there are Nova faults)."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PREFIXES)


def is_open(path):
    return path.rstrip("/") in OPEN_PATHS or path in OPEN_PATHS


def error_response(error):
    return faults.response(error)


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
        status = declaration.response.status
        answer = ("", status) if body is None else (flask.jsonify(body), status)
        response = flask.make_response(answer)
        if compute:
            response.headers.update(microversion.response_headers(version))
        return response

    return view


def owns_compute(path):
    return path == COMPUTE_PREFIX or path.startswith(COMPUTE_PREFIX + "/")
