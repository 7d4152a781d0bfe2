"""JSON schemas of request bodies and query parameters; the OpenAPI document uses them."""

import json

import jsonschema

from pcisim.api import errors

MAX_BODY_BYTES = 1024 * 1024
# NOTE: no control characters: a NUL is refused by PostgreSQL, a newline breaks the
# CLI's tables. (Unpaired surrogates, which no database stores, never pass json_body.)
NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$"}
MAX_PCI_COUNT = 64
MAX_ID = 2**31 - 1  # NOTE: ids are 32-bit integer columns
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


def json_body(request):
    """The request's body, decoded: 400 when there is none or it is not valid JSON (or
    gives a key twice), 415 when it is not declared ``application/json``."""
    data = request.get_data(cache=True)
    if not data:
        raise errors.ApiError(400, "request.invalid", "body: a JSON object is required")
    if not request.is_json:
        raise errors.ApiError(
            415,
            "request.unsupported_media_type",
            f"body: Content-Type {request.mimetype or '(none)'!r} is not application/json",
        )
    try:
        body = json.loads(data, object_pairs_hook=_unique_keys)
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        reason = "body: not valid Unicode: a \\u escape gives an unpaired surrogate"
        raise errors.ApiError(400, "request.malformed_json", reason) from None
    except (ValueError, RecursionError) as error:
        raise errors.ApiError(400, "request.malformed_json", f"body: not valid JSON: {error}")
    return body


def _unique_keys(pairs):
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"key {key!r} appears twice in one object")
        mapping[key] = value
    return mapping


def validate(instance, schema, what):
    """Raise a 400 ``ApiError`` naming the first thing wrong with ``instance``."""
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        path = "/".join(map(str, error.absolute_path))
        where = f"{path}: " if path else ""
        message = error.message
        if error.validator == "pattern":
            message = f"{error.instance!r} holds a control character"
        raise errors.ApiError(400, "request.invalid", f"{what}: {where}{message}")
