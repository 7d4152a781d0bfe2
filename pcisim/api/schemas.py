"""JSON schemas of request bodies and query strings, which handlers declare."""

MAX_BODY_BYTES = 1024 * 1024
# NOTE: no control characters: a NUL is refused by PostgreSQL, a newline breaks the
# CLI's tables. (Unpaired surrogates, which no database stores, never pass validation.json_body.)
NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$"}
MAX_PCI_COUNT = 64
MAX_ID = 2**31 - 1  # NOTE: ids are 32-bit integer columns
ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
ALIAS_REQUEST = {
    "type": "object",
    "properties": {
        "alias": NAME,
        "count": {"type": "integer", "minimum": 1, "maximum": MAX_PCI_COUNT},
    },
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
PCI_DEVICE_QUERY = {
    "type": "object",
    "properties": {
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
        "compute_node_id": ID,
    },
    "additionalProperties": False,
}
