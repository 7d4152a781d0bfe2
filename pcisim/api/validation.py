"""What a handler declares about its requests and responses, and the checks made of it.

A handler declares with decorators, in the shape Nova's API uses::

    @validation.schema(schemas.SERVER_CREATE)
    @validation.response_body_schema(schemas.SERVER_SHOW, status=202)
    def create_server(api, context, body): ...

    @validation.query_schema(schemas.PCI_DEVICE_QUERY)
    @validation.response_body_schema(schemas.PCI_DEVICE_LIST)
    def list_pci_devices(api, context, query): ...

The decorators only record the schemas on the handler (it is returned unwrapped, so
it stays callable as written); whoever serves the handler reads them with
``declared``: the app checks each request against them before the handler runs and
answers with the declared status, the OpenAPI document describes them, and the tests
check that responses conform. Nothing here knows a route or a handler.
"""

import dataclasses
import json
import re

import jsonschema

from pcisim import exception, strict_json
from pcisim.api import errors

_ATTRIBUTE = "_pcisim_api_declaration"
# NOTE: bounded, as Python refuses to parse an integer of over 4300 digits; a longer
# one stays text and is refused as not an integer.
_INTEGER = re.compile(r"-?[0-9]{1,64}")


@dataclasses.dataclass(frozen=True)
class Response:
    """What a handler answers when it succeeds: a status, and a body of ``body_schema``
    (None: no body)."""

    status: int
    body_schema: dict | None


@dataclasses.dataclass(frozen=True)
class Declaration:
    """The schemas a handler declares; None where it declares none."""

    request_body_schema: dict | None = None
    query_schema: dict | None = None
    response: Response | None = None
    # Statuses the handler may answer besides those its schemas and path imply
    # (``openapi``): a 409 when what it creates exists already, say.
    errors: dict = dataclasses.field(default_factory=dict)


def schema(request_body_schema):
    """Declare the JSON schema of the request body: a request whose body does not
    conform is refused, and the handler gets the decoded body as ``body``."""
    return _declaring(request_body_schema=request_body_schema)


def query_schema(query_schema):
    """Declare the JSON schema of the query string, an object of one value per name:
    a request whose query does not conform is refused, and the handler gets it as
    ``query``. Without it, the query string is ignored."""
    return _declaring(query_schema=query_schema)


def response_body_schema(response_body_schema, status=200):
    """Declare the status the handler answers when it succeeds, and the JSON schema of
    the body it then returns (None: it returns None, and the response has no body)."""
    return _declaring(response=Response(status, response_body_schema))


def error_statuses(**described):
    """Declare statuses the handler may answer besides those its schemas and path
    imply, each with what it means: ``error_statuses(**{"409": "it exists"})``."""
    return _declaring(errors=described)


def _declaring(**declared):
    def declare(handler):
        declaration = getattr(handler, _ATTRIBUTE, Declaration())
        setattr(handler, _ATTRIBUTE, dataclasses.replace(declaration, **declared))
        return handler

    return declare


def declared(handler):
    """What ``handler`` declares. Every handler served declares its response: without
    it, ``UndeclaredResponse``, since no one could say what the handler answers."""
    declaration = getattr(handler, _ATTRIBUTE, Declaration())
    if declaration.response is None:
        raise exception.UndeclaredResponse(handler=handler.__qualname__)
    return declaration


def request_arguments(declaration, request):
    """The keyword arguments a handler gets for ``request``, checked against its
    ``declaration``: ``body`` and ``query`` where it declares their schemas.

    Raises an ``errors.ApiError`` (400, 415) naming what is wrong; reading a body over
    the app's ``MAX_CONTENT_LENGTH`` raises werkzeug's 413.
    """
    arguments = {}
    if declaration.request_body_schema is not None:
        arguments["body"] = _json_body(request)
        _validate(arguments["body"], declaration.request_body_schema, "body")
    if declaration.query_schema is not None:
        arguments["query"] = _query(request, declaration.query_schema)
        _validate(arguments["query"], declaration.query_schema, "query")
    return arguments


def _json_body(request):
    """The request's body, decoded: 400 when there is none or it is not valid JSON (or
    gives a key twice), 415 when it is not declared ``application/json``."""
    data = request.get_data(cache=True)
    if not data:
        raise errors.ApiError(400, "request.invalid", "body: a JSON object is required")
    if not request.is_json:
        raise errors.ApiError(
            415,
            "request.unsupported_media_type",
            f"body: Content-Type {request.mimetype or '(none)'!r} is not application/json",
        )
    try:
        body = strict_json.loads(data)
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        reason = "body: not valid Unicode: a \\u escape gives an unpaired surrogate"
        raise errors.ApiError(400, "request.malformed_json", reason) from None
    except (ValueError, RecursionError) as error:
        raise errors.ApiError(400, "request.malformed_json", f"body: not valid JSON: {error}")
    return body


def _query(request, query_schema):
    """The query string as a mapping of one value per name: 400 for a name given twice.

    A query value is text; where ``query_schema`` declares a name an integer, a value
    of decimal digits becomes one. Any other value stays text, for the schema to refuse.
    """
    repeated = sorted(name for name, values in request.args.lists() if len(values) > 1)
    if repeated:
        raise errors.ApiError(400, "request.invalid", f"query parameter(s) {repeated} given twice")
    properties = query_schema.get("properties", {})
    return {name: _typed(value, properties.get(name, {})) for name, value in request.args.items()}


def _typed(value, schema):
    return int(value) if schema.get("type") == "integer" and _INTEGER.fullmatch(value) else value


def _validate(instance, schema, what):
    """Raise a 400 ``ApiError`` naming the first thing wrong with ``instance``."""
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        path = "/".join(map(str, error.absolute_path))
        where = f"{path}: " if path else ""
        message = error.message
        if error.validator == "pattern":
            message = f"{error.instance!r} holds a control character"
        raise errors.ApiError(400, "request.invalid", f"{what}: {where}{message}")
