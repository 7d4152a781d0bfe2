"""Errors of the Nova face, as Nova writes them: ``{"itemNotFound": {"code": 404,
"message": ...}}``, the key named by the status (``computeFault`` when Nova names none).

The statuses come from pcisim's one table (``errors.for_exception``), so an exception
means the same on both faces; only the body differs.
"""

import http

import flask
from oslo_log import log as logging
from werkzeug import exceptions as http_exceptions

from pcisim import exception
from pcisim.api import errors

LOG = logging.getLogger(__name__)

# NOTE: Nova's names (nova/api/openstack/wsgi.py, Fault); any other status, a 406 for
# an unsupported microversion among them, is a computeFault.
FAULT_NAMES = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    409: "conflictingRequest",
    413: "overLimit",
    415: "badMediaType",
    429: "overLimit",
    501: "notImplemented",
    503: "serviceUnavailable",
}
# Exceptions the Nova face answers with a status of their own.
STATUSES = (
    (exception.AuthenticationFailed, 401),
    (exception.InvalidGlobalAPIVersion, 406),
    (exception.NoValidHost, 400),
)


def body(status, message):
    return {FAULT_NAMES.get(status, "computeFault"): {"code": status, "message": message}}


def identity_response(error):
    """As ``response``, in Keystone's body: ``{"error": {"code", "title", "message"}}``."""
    answer = response(error)
    fault, status = answer[0].get_json(), answer[1]
    ((_, detail),) = fault.items()
    body = {
        "error": {
            "code": status,
            "title": http.HTTPStatus(status).phrase,
            "message": detail["message"],
        }
    }
    return (flask.jsonify(body), *answer[1:])


def response(error):
    """The Flask response for ``error`` raised while serving the Nova face."""
    if isinstance(error, errors.ApiError):
        return flask.jsonify(body(error.status, error.message)), error.status
    if isinstance(error, http_exceptions.HTTPException):
        headers = [(k, v) for k, v in error.get_headers() if k != "Content-Type"]
        return flask.jsonify(body(error.code, error.description)), error.code, headers
    for cls, status in STATUSES:
        if isinstance(error, cls):
            return flask.jsonify(body(status, error.message)), status
    mapped = errors.for_exception(error)
    if mapped is not None:
        status, _ = mapped
        return flask.jsonify(body(status, error.message)), status
    LOG.exception("Unexpected error serving %s %s", flask.request.method, flask.request.path)
    message = "Unexpected API Error. Please report this at pcisim's issue tracker."
    return flask.jsonify(body(500, message)), 500
