"""The OpenAPI 3 document of the HTTP API, built from the route table and the schemas."""

from pcisim.api import schemas

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
    "node_id": {"type": "integer", "minimum": 0, "maximum": schemas.MAX_ID},
    "device_id": {"type": "integer", "minimum": 0, "maximum": schemas.MAX_ID},
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
        "openapi": "3.0.3",
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
    if handler.__name__ == "list_pci_devices":
        parameters += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in schemas.PCI_DEVICE_FILTERS.items()
        ]
    if parameters:
        operation["parameters"] = parameters
    if method == "POST":
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas.SERVER_CREATE}},
        }
        operation["responses"]["413"] = _error_response("body over 1 MiB")
        operation["responses"]["415"] = _error_response("body not application/json")
    return operation


def _error_response(description):
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}
