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
_SPEC_VALUE = {"type": ["string", "number", "boolean"], "maxLength": 255}
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
