"""JSON schemas of the Nova face: what its handlers declare (``pcisim.api.validation``)."""

from pcisim.api import schemas

STRING, INTEGER, BOOLEAN = schemas.STRING, schemas.INTEGER, {"type": "boolean"}
LINKS = schemas.list_of(
    {
        "type": "object",
        "properties": {"rel": STRING, "href": STRING, "type": STRING},
        "required": ["rel", "href"],
    }
)
# A fault: one key, named by the status (``faults.FAULT_NAMES``).
FAULT = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": schemas.exact_object({"code": INTEGER, "message": STRING}),
}
# NOTE: the face accepts what clients send, as Nova does for the parameters it ignores:
# a query may name anything; the names below are those read.
ANY_QUERY = {"type": "object", "properties": {}, "additionalProperties": True}

VERSION = schemas.exact_object(
    {
        "id": STRING,
        "status": STRING,
        "version": STRING,
        "min_version": STRING,
        "updated": STRING,
        "links": LINKS,
        "media-types": schemas.list_of({"type": "object"}),
    }
)
VERSION_SHOW = schemas.exact_object({"version": VERSION})
VERSION_LIST = schemas.exact_object({"versions": schemas.list_of(VERSION)})

# ------------------------------------------------------------------------- flavors

_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": r"^(?! )[^\x00-\x1f\x7f-\x9f]*(?<! )$",
}
_FLAVOR_ID = {
    "type": ["string", "integer", "null"],
    "minLength": 1,
    "maxLength": 255,
    "pattern": r"^(?! )[a-zA-Z0-9. _-]+(?<! )$",
    "minimum": 0,
    "maximum": schemas.MAX_ID,
}


def _size(minimum, maximum=schemas.MAX_ID):
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


FLAVOR_CREATE = schemas.exact_object(
    {
        "flavor": schemas.exact_object(
            {
                "name": _NAME,
                "id": _FLAVOR_ID,
                "ram": _size(1),
                "vcpus": _size(1),
                "disk": _size(0),
                "OS-FLV-EXT-DATA:ephemeral": _size(0),
                # NOTE: novaclient sends swap as text ("" for none); nine digits fit.
                "swap": {"oneOf": [_size(0), {"type": "string", "pattern": "^[0-9]{0,9}$"}]},
                "rxtx_factor": {"type": "number", "exclusiveMinimum": 0},
                "os-flavor-access:is_public": BOOLEAN,
                "description": {"type": ["string", "null"], "maxLength": 65535},
            },
            optional=(
                "id",
                "OS-FLV-EXT-DATA:ephemeral",
                "swap",
                "rxtx_factor",
                "os-flavor-access:is_public",
                "description",
            ),
        )
    }
)
_COUNT_TEXT = {"type": "string", "pattern": "^[0-9]{1,9}$"}
FLAVOR_PUBLIC_VALUES = {
    **dict.fromkeys(("True", "true", "1", "yes"), True),
    **dict.fromkeys(("False", "false", "0", "no"), False),
    **dict.fromkeys(("None", "none"), None),
}
FLAVOR_QUERY = {
    "type": "object",
    "properties": {
        "is_public": {"type": "string", "enum": list(FLAVOR_PUBLIC_VALUES)},
        "minRam": _COUNT_TEXT,
        "minDisk": _COUNT_TEXT,
    },
    "additionalProperties": True,
}
EXTRA_SPEC_KEY = r"^[a-zA-Z0-9-_:. /]{1,255}$"
MAX_SPEC_VALUE = 255
_SPEC_VALUE = {"type": ["string", "number", "boolean"], "maxLength": MAX_SPEC_VALUE}
_SPECS = {
    "type": "object",
    "patternProperties": {EXTRA_SPEC_KEY: _SPEC_VALUE},
    "additionalProperties": False,
}
EXTRA_SPECS_CREATE = schemas.exact_object({"extra_specs": _SPECS})
EXTRA_SPEC_UPDATE = {**_SPECS, "minProperties": 1, "maxProperties": 1}
EXTRA_SPECS = schemas.exact_object(
    {"extra_specs": {"type": "object", "additionalProperties": STRING}}
)
EXTRA_SPEC = {"type": "object", "additionalProperties": STRING}

_FLAVOR_SUMMARY = {
    "id": STRING,
    "name": STRING,
    "links": LINKS,
    "description": schemas.nullable("string"),
}
FLAVOR = schemas.exact_object(
    {
        **_FLAVOR_SUMMARY,
        "ram": INTEGER,
        "disk": INTEGER,
        "vcpus": INTEGER,
        "OS-FLV-EXT-DATA:ephemeral": INTEGER,
        "OS-FLV-DISABLED:disabled": BOOLEAN,
        "swap": {"type": ["integer", "string"]},
        "rxtx_factor": {"type": "number"},
        "os-flavor-access:is_public": BOOLEAN,
        "extra_specs": {"type": "object", "additionalProperties": STRING},
    },
    optional=("description", "extra_specs"),
)
FLAVOR_SHOW = schemas.exact_object({"flavor": FLAVOR})
FLAVOR_LIST = schemas.exact_object(
    {"flavors": schemas.list_of(schemas.exact_object(_FLAVOR_SUMMARY, optional=("description",)))}
)
FLAVOR_DETAIL_LIST = schemas.exact_object({"flavors": schemas.list_of(FLAVOR)})

# -------------------------------------------------------------------------- images

IMAGE_QUERY = {
    "type": "object",
    "properties": {"name": STRING, "id": STRING},
    "additionalProperties": True,
}
IMAGE = {
    "type": "object",
    "properties": {"id": STRING, "name": STRING, "status": {"const": "active"}},
    "required": ["id", "name", "status"],
}
IMAGE_LIST = {
    "type": "object",
    "properties": {"images": schemas.list_of(IMAGE)},
    "required": ["images"],
}
IMAGE_VERSIONS = schemas.exact_object(
    {
        "versions": schemas.list_of(
            schemas.exact_object({"id": STRING, "status": STRING, "links": LINKS})
        )
    }
)

# --------------------------------------------------------------------- hypervisors

MAX_ID = schemas.MAX_ID
HYPERVISOR_QUERY = {
    "type": "object",
    "properties": {"hypervisor_hostname_pattern": STRING},
    "additionalProperties": True,
}
_HYPERVISOR = {
    "id": {"type": ["string", "integer"]},
    "hypervisor_hostname": STRING,
    "state": {"enum": ["up", "down"]},
    "status": {"enum": ["enabled", "disabled"]},
}
HYPERVISOR = {
    "type": "object",
    "properties": {
        **_HYPERVISOR,
        "service": {"type": "object"},
        "os-pci:pci_stats": schemas.list_of(schemas.PCI_POOL),
    },
    "required": [*_HYPERVISOR, "service", "os-pci:pci_stats"],
}
HYPERVISOR_LIST = schemas.exact_object(
    {"hypervisors": schemas.list_of(schemas.exact_object(_HYPERVISOR))}
)
HYPERVISOR_DETAIL_LIST = schemas.exact_object({"hypervisors": schemas.list_of(HYPERVISOR)})
HYPERVISOR_SHOW = schemas.exact_object({"hypervisor": HYPERVISOR})
AGGREGATE_LIST = schemas.exact_object({"aggregates": schemas.list_of({"type": "object"})})

# ------------------------------------------------------------------------- servers

MAX_SERVERS_AT_ONCE = 16
_TEXT = {"type": "string", "maxLength": 65535}
_COUNT = {
    "oneOf": [
        {"type": "integer", "minimum": 1, "maximum": MAX_SERVERS_AT_ONCE},
        {"type": "string", "pattern": "^([1-9]|1[0-6])$"},
    ]
}
_NETWORK = schemas.exact_object(
    {"uuid": STRING, "port": STRING, "fixed_ip": STRING, "tag": STRING},
    optional=("uuid", "port", "fixed_ip", "tag"),
)
_REF = {"type": ["string", "integer"], "minLength": 1, "maxLength": 1024}
SERVER_CREATE = schemas.exact_object(
    {
        "server": schemas.exact_object(
            {
                "name": schemas.NAME,
                "flavorRef": _REF,
                "imageRef": {"type": ["string", "null"], "maxLength": 1024},
                "networks": {
                    "oneOf": [
                        schemas.list_of(_NETWORK),
                        {"type": "string", "enum": ["none", "auto"]},
                    ]
                },
                "min_count": _COUNT,
                "max_count": _COUNT,
                "block_device_mapping_v2": schemas.list_of({"type": "object"}),
                "block_device_mapping": schemas.list_of({"type": "object"}),
                "security_groups": schemas.list_of(schemas.exact_object({"name": schemas.NAME})),
                "metadata": {
                    "type": "object",
                    "maxProperties": 128,
                    "additionalProperties": {"type": "string", "maxLength": 255},
                },
                "availability_zone": STRING,
                "key_name": {"type": ["string", "null"]},
                "user_data": _TEXT,
                "config_drive": {"type": ["boolean", "string"]},
                "description": {"type": ["string", "null"], "maxLength": 255},
                "adminPass": STRING,
                "accessIPv4": STRING,
                "accessIPv6": STRING,
                "OS-DCF:diskConfig": {"enum": ["AUTO", "MANUAL"]},
                "return_reservation_id": {"type": ["boolean", "string"]},
                "tags": schemas.list_of(STRING),
                "hostname": STRING,
            },
            optional=(
                "imageRef",
                "networks",
                "min_count",
                "max_count",
                "block_device_mapping_v2",
                "block_device_mapping",
                "security_groups",
                "metadata",
                "availability_zone",
                "key_name",
                "user_data",
                "config_drive",
                "description",
                "adminPass",
                "accessIPv4",
                "accessIPv6",
                "OS-DCF:diskConfig",
                "return_reservation_id",
                "tags",
                "hostname",
            ),
        ),
        "os:scheduler_hints": {"type": "object"},
        "OS-SCH-HNT:scheduler_hints": {"type": "object"},
    },
    optional=("os:scheduler_hints", "OS-SCH-HNT:scheduler_hints"),
)
SERVER_QUERY = {
    "type": "object",
    "properties": {"name": STRING, "status": STRING, "deleted": STRING},
    "additionalProperties": True,
}
_SERVER_SUMMARY = {"id": schemas.UUID, "name": schemas.nullable("string"), "links": LINKS}
SERVER = {
    "type": "object",
    "properties": {
        **_SERVER_SUMMARY,
        "status": STRING,
        "flavor": {"type": "object"},
        "addresses": {"type": "object"},
        "OS-EXT-STS:vm_state": schemas.nullable("string"),
        "OS-EXT-STS:task_state": schemas.nullable("string"),
        "OS-EXT-SRV-ATTR:host": schemas.nullable("string"),
        "os-pci:pci_devices": schemas.list_of(schemas.PCI_DEVICE),
        "fault": {"type": "object"},
    },
    "required": [*_SERVER_SUMMARY, "status", "flavor", "addresses", "os-pci:pci_devices"],
}
SERVER_CREATED = schemas.exact_object(
    {
        "server": schemas.exact_object(
            {
                "id": schemas.UUID,
                "links": LINKS,
                "OS-DCF:diskConfig": STRING,
                "security_groups": schemas.list_of({"type": "object"}),
                "adminPass": STRING,
            }
        )
    }
)
SERVER_LIST = schemas.exact_object(
    {"servers": schemas.list_of(schemas.exact_object(_SERVER_SUMMARY))}
)
SERVER_DETAIL_LIST = schemas.exact_object({"servers": schemas.list_of(SERVER)})
SERVER_SHOW = schemas.exact_object({"server": SERVER})

# ------------------------------------------------------------------------ identity

_IDENTITY_VERSION = {"type": "object", "required": ["id", "status", "links"]}
IDENTITY_VERSION = schemas.exact_object({"version": _IDENTITY_VERSION})
IDENTITY_VERSIONS = schemas.exact_object(
    {"versions": schemas.exact_object({"values": schemas.list_of(_IDENTITY_VERSION)})}
)
_SECRET = {"type": "string", "maxLength": 4096}
TOKEN_CREATE = schemas.exact_object(
    {
        "auth": {
            "type": "object",
            "properties": {
                "identity": {
                    "type": "object",
                    "properties": {
                        "methods": {
                            "type": "array",
                            "items": {"enum": ["password", "token"]},
                            "minItems": 1,
                        },
                        "password": {
                            "type": "object",
                            "properties": {
                                "user": {
                                    "type": "object",
                                    "properties": {"name": STRING, "password": _SECRET},
                                }
                            },
                        },
                        "token": {"type": "object", "properties": {"id": _SECRET}},
                    },
                    "required": ["methods"],
                },
                "scope": {"type": ["object", "string"]},
            },
            "required": ["identity"],
        }
    }
)
TOKEN = schemas.exact_object(
    {
        "token": {
            "type": "object",
            "properties": {"catalog": schemas.list_of({"type": "object"})},
            "required": ["methods", "user", "expires_at", "catalog"],
        }
    }
)
# Keystone's error body, on the identity face.
IDENTITY_ERROR = schemas.exact_object(
    {"error": schemas.exact_object({"code": INTEGER, "title": STRING, "message": STRING})}
)
