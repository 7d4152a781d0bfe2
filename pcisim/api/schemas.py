"""JSON schemas of request bodies and query parameters; the OpenAPI document uses them."""

import jsonschema

from pcisim.api import errors

NAME = {"type": "string", "minLength": 1, "maxLength": 255}
ALIAS_REQUEST = {
    "type": "object",
    "properties": {"alias": NAME, "count": {"type": "integer", "minimum": 1, "maximum": 64}},
    "required": ["alias", "count"],
    "additionalProperties": False,
}
PCI_REQUESTS = {
    "oneOf": [
        {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": r"^[^\x00]*$"},
        {"type": "array", "items": ALIAS_REQUEST, "minItems": 1, "maxItems": 16},
    ]
}
SERVER_CREATE = {
    "type": "object",
    "properties": {
        "server": {
            "type": "object",
            "properties": {
                "name": NAME,
                "pci_requests": PCI_REQUESTS,
                "vcpus": {"type": "integer", "minimum": 1, "maximum": 1024},
                "memory_mb": {"type": "integer", "minimum": 1, "maximum": 16777216},
                "root_gb": {"type": "integer", "minimum": 0, "maximum": 1048576},
                "numa_cells": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0, "maximum": 1023},
                    "minItems": 1,
                    "maxItems": 64,
                    "uniqueItems": True,
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "required": ["server"],
    "additionalProperties": False,
}
PCI_DEVICE_FILTERS = {
    "host": NAME,
    "status": {
        "type": "string",
        "enum": [
            "available",
            "claimed",
            "allocated",
            "removed",
            "deleted",
            "unavailable",
            "unclaimable",
        ],
    },
    "dev_type": {"type": "string", "enum": ["type-PCI", "type-PF", "type-VF", "vdpa"]},
    "server": {"type": "string", "format": "uuid", "minLength": 36, "maxLength": 36},
}


def validate(instance, schema, what):
    """Raise a 400 ``ApiError`` naming the first thing wrong with ``instance``."""
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(instance)
    )
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or what
        raise errors.ApiError(400, "request.invalid", f"{what}: {where}: {error.message}")
