"""JSON schemas (2020-12) of request bodies, query strings and response bodies, which
handlers declare (``validation``).

A response schema says exactly what a view returns: every field required unless the
view leaves it out, no other field, ``null`` only where the object's field is nullable.
"""

from pcisim.pci import request as pci_request

MAX_BODY_BYTES = 1024 * 1024
# NOTE: no control characters: a NUL is refused by PostgreSQL, a newline breaks the
# CLI's tables. (Unpaired surrogates, which no database stores, are refused as the body
# is decoded, before any schema.)
NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$"}
MAX_PCI_COUNT = pci_request.MAX_COUNT
MAX_ID = 2**31 - 1  # NOTE: ids are 32-bit integer columns
ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
UUID = {"type": "string", "format": "uuid"}
PCI_DEVICE_STATUS = {
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
}
PCI_DEVICE_TYPE = {"type": "string", "enum": ["type-PCI", "type-PF", "type-VF", "vdpa"]}

# ------------------------------------------------------------------------- requests

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
        "status": PCI_DEVICE_STATUS,
        "dev_type": PCI_DEVICE_TYPE,
        "server": {**UUID, "minLength": 36, "maxLength": 36},
        "compute_node_id": ID,
    },
    "additionalProperties": False,
}

# ------------------------------------------------------------------------ responses


def _object(properties, optional=()):
    """An object with exactly ``properties``, each always there but the ``optional``."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def _list(items):
    return {"type": "array", "items": items}


def _nullable(type_, **keywords):
    return {"type": [type_, "null"], **keywords}


# The helpers under the names other faces' schemas use them by.
exact_object, list_of, nullable = _object, _list, _nullable

STRING, INTEGER = {"type": "string"}, {"type": "integer"}
TIME = _nullable("string", format="date-time")
PCI_DEVICE = _object(
    {
        "id": ID,
        "compute_node_id": ID,
        "address": STRING,
        "vendor_id": STRING,
        "product_id": STRING,
        "dev_type": PCI_DEVICE_TYPE,
        "status": PCI_DEVICE_STATUS,
        "parent_addr": _nullable("string"),
        "numa_node": _nullable("integer"),
        "label": STRING,
        "server": _nullable("string", format="uuid"),
    }
)
_SERVER = {
    "id": UUID,
    "name": _nullable("string"),
    "status": STRING,
    "task_state": _nullable("string"),
    "host": _nullable("string"),
    "node": _nullable("string"),
    "vcpus": _nullable("integer"),
    "memory_mb": _nullable("integer"),
    "root_gb": _nullable("integer"),
    "created_at": TIME,
}
FAULT = _object({"code": INTEGER, "message": _nullable("string"), "created_at": TIME})
SERVER_DETAIL = _object(
    {**_SERVER, "fault": FAULT, "pci_devices": _list(PCI_DEVICE)}, optional=("fault",)
)
PCI_POOL = _object(
    {
        "vendor_id": STRING,
        "product_id": STRING,
        "numa_node": _nullable("integer"),
        "dev_type": PCI_DEVICE_TYPE,
        "tags": {"type": "object", "additionalProperties": _nullable("string")},
        "count": {"type": "integer", "minimum": 0},
    }
)
HYPERVISOR = _object(
    {
        "id": ID,
        "host": STRING,
        "hypervisor_hostname": STRING,
        **dict.fromkeys(
            ("vcpus", "vcpus_used", "memory_mb", "memory_mb_used", "local_gb", "local_gb_used"),
            INTEGER,
        ),
        "pci_pools": _list(PCI_POOL),
    }
)
PF = _object({**PCI_DEVICE["properties"], "vfs": _list(PCI_DEVICE)})

SERVER_LIST = _object({"servers": _list(_object(_SERVER))})
SERVER_SHOW = _object({"server": SERVER_DETAIL})
HYPERVISOR_LIST = _object({"hypervisors": _list(HYPERVISOR)})
HYPERVISOR_SHOW = _object({"hypervisor": HYPERVISOR})
PCI_TREE = _object(
    {
        "host": STRING,
        "hypervisor_hostname": STRING,
        "pfs": _list(PF),
        "devices": _list(PCI_DEVICE),
    }
)
PCI_DEVICE_LIST = _object({"pci_devices": _list(PCI_DEVICE)})
PCI_DEVICE_SHOW = _object({"pci_device": PCI_DEVICE})
ERROR = _object({"error": _object({"code": STRING, "message": STRING})})
