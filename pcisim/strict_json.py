"""JSON read strictly: an object that gives a key twice is refused (``json`` keeps the
last value silently, so a typo'd duplicate would win unseen)."""

import json


def loads(text):
    """``json.loads`` that raises ``ValueError`` naming a key given twice in an object."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def _unique_keys(pairs):
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"key {key!r} appears twice in one object")
        mapping[key] = value
    return mapping
