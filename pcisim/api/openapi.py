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
    "node_id": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
    "device_id": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
}
SUCCESS = {"POST": "202", "DELETE": "204"}


def document(routes):
    paths = {}
    for path, method, handler in routes:
        openapi_path = path.replace("<uuid:", "{").replace("<int:", "{").replace(">", "}")
        paths.setdefault(openapi_path, {})[method.lower()] = _operation(path, method, handler)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "pcisim",
            "version": "1.0",
            "description": "A mini compute control plane built around PCI devices.",
        },
        "paths": paths,
    }


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
    return operation


def _error_response(description):
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}
