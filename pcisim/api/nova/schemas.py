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
