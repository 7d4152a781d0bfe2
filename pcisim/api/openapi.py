"""The OpenAPI 3.1 document of the HTTP API, built from the route table and what each
route's handler declares (``validation``)."""

import http
import re

from pcisim.api import schemas, validation

# NOTE: the values a route's converter lets through that can name something: the int
# converter takes no sign, and no id is above MAX_ID.
CONVERTERS = {
    "int": schemas.ID,
    "uuid": schemas.UUID,
    "string": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
}
PATH_VALUE = re.compile(r"<(\w+):(\w+)>")


def document(routes, auth_header=None, error_schema=None, is_open=None):
    """The document of ``routes``; with ``auth_header``, every operation but those at
    paths that ``is_open`` requires that header (an API key security scheme) and may
    answer 401. ``error_schema(path)`` is the schema of the error bodies answered at a
    path (default: pcisim's)."""
    error_schema = error_schema or (lambda path: schemas.ERROR)
    is_open = is_open or (lambda path: False)
    paths, named = {}, {}
    for path, method, handler in routes:
        openapi_path = PATH_VALUE.sub(r"{\2}", path)
        operation = _operation(path, handler, error_schema(path))
        # NOTE: a handler served at several paths (Nova's image routes) gets an
        # operationId per path, as the document requires.
        named[handler] = named.get(handler, 0) + 1
        if named[handler] > 1:
            operation["operationId"] += f"_{named[handler]}"
        if auth_header and is_open(path):
            operation["security"] = []
        elif auth_header:
            operation["responses"]["401"] = _error_response(
                f"missing or wrong {auth_header}", schemas.ERROR
            )
        paths.setdefault(openapi_path, {})[method.lower()] = operation
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "pcisim",
            "version": "1.0",
            "description": "A mini compute control plane built around PCI devices.",
        },
        "paths": paths,
    }
    if auth_header:
        document["components"] = {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": auth_header}}
        }
        document["security"] = [{"token": []}]
    return document


def _operation(path, handler, error_schema):
    declaration = validation.declared(handler)
    operation = {
        "operationId": handler.__name__,
        "summary": (handler.__doc__ or handler.__name__.replace("_", " ")).splitlines()[0],
        "responses": {
            **_success_response(declaration.response),
            **{
                status: _error_response(description, error_schema)
                for status, description in _errors(path, declaration).items()
            },
        },
    }
    parameters = _path_parameters(path)
    if declaration.query_schema is not None:
        parameters += _query_parameters(declaration.query_schema)
    if parameters:
        operation["parameters"] = parameters
    if declaration.request_body_schema is not None:
        operation["requestBody"] = {"required": True, **_json(declaration.request_body_schema)}
    return operation


def _success_response(response):
    described = {"description": http.HTTPStatus(response.status).phrase}
    if response.body_schema is not None:
        described.update(_json(response.body_schema))
    return {str(response.status): described}


def _errors(path, declaration):
    """The errors an operation answers, by what it declares: a body or query string
    can be refused (400), a body also for its size or type (413, 415), and what a path
    names may not be there (404)."""
    errors = {}
    if declaration.request_body_schema is not None or declaration.query_schema is not None:
        errors["400"] = "invalid request"
    if _path_parameters(path):
        errors["404"] = "not found"
    if declaration.request_body_schema is not None:
        errors["413"] = "body over 1 MiB"
        errors["415"] = "body not application/json"
    return {**errors, **declaration.errors}


def _path_parameters(path):
    return [
        {"name": name, "in": "path", "required": True, "schema": CONVERTERS[converter]}
        for converter, name in PATH_VALUE.findall(path)
    ]


def _query_parameters(query_schema):
    required = set(query_schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": schema}
        for name, schema in query_schema["properties"].items()
    ]


def _error_response(description, error_schema):
    return {"description": description, **_json(error_schema)}


def _json(schema):
    return {"content": {"application/json": {"schema": schema}}}
