"""The OpenAPI 3.1 document of the HTTP API, built from the route table and what each
route's handler declares (``validation``)."""

from pcisim.api import schemas, validation

ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}
PATH_PARAMETERS = {
    "server_id": {"type": "string", "format": "uuid"},
    "node_id": schemas.ID,
    "device_id": schemas.ID,
}
SUCCESS = {"POST": "202", "DELETE": "204"}


def document(routes, auth_header=None):
    """The document of ``routes``; with ``auth_header``, every operation requires that
    header (an API key security scheme) and may answer 401."""
    paths = {}
    for path, method, handler in routes:
        openapi_path = path.replace("<uuid:", "{").replace("<int:", "{").replace(">", "}")
        operation = _operation(path, method, handler)
        if auth_header:
            operation["responses"]["401"] = _error_response(f"missing or wrong {auth_header}")
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


def _operation(path, method, handler):
    declaration = validation.declared(handler)
    operation = {
        "operationId": handler.__name__,
        "summary": (handler.__doc__ or handler.__name__.replace("_", " ")).splitlines()[0],
        "responses": {
            SUCCESS.get(method, "200"): {"description": "success"},
            "400": _error_response("invalid request"),
            "404": _error_response("not found"),
            "409": _error_response("conflict"),
        },
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in PATH_PARAMETERS.items()
        if f":{name}>" in path
    ]
    if declaration.query_schema is not None:
        parameters += _query_parameters(declaration.query_schema)
    if parameters:
        operation["parameters"] = parameters
    if declaration.request_body_schema is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": declaration.request_body_schema}},
        }
        operation["responses"]["413"] = _error_response("body over 1 MiB")
        operation["responses"]["415"] = _error_response("body not application/json")
    return operation


def _query_parameters(query_schema):
    required = set(query_schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": schema}
        for name, schema in query_schema["properties"].items()
    ]


def _error_response(description):
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}
