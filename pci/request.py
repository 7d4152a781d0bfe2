"""PCI aliases (``[pci] alias``) and the device requests that name them.

An operator defines aliases; a user asks for devices by alias, as text
(``"gpu:2,nic:1"``, Nova's ``pci_passthrough:alias`` flavor extra spec) or as the
HTTP API's list (``[{"alias": "gpu", "count": 2}]``). Each requested alias becomes
one ``InstancePCIRequest`` whose ``spec`` dicts the scheduler and the claim match
against pools and devices with :func:`spec_matches`.
"""

import dataclasses
import json
import re
import uuid

from pcisim import exception
from pcisim.objects import fields
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.pci import ids

NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
DEFAULT_NUMA_POLICY = "legacy"
# The most devices one item of a request may ask for, whichever face or flavor asks.
MAX_COUNT = 64
# NOTE: as in Nova, vDPA devices are not requested by alias (Nova asks for them through
# a vDPA port, which pcisim does not have): an alias may not name that type.
ALIAS_DEVICE_TYPES = (
    fields.PciDeviceType.STANDARD,
    fields.PciDeviceType.SRIOV_PF,
    fields.PciDeviceType.SRIOV_VF,
)

_ALIAS_KEYS = ("name", "vendor_id", "product_id", "device_type", "numa_policy")
_ID_KEYS = ("vendor_id", "product_id")
_DIGITS = re.compile(r"[0-9]+")
_REQUEST_SEPARATORS = (":", ",")


@dataclasses.dataclass(frozen=True)
class Alias:
    """A named PCI request: a device matching any one of ``specs``.

    ``specs`` hold ``vendor_id`` and ``product_id`` (ids as `pci.ids` reads them, in
    lowercase), which every definition must give, as Nova requires since 2025.

    ``device_type`` is one of ``ALIAS_DEVICE_TYPES``, or None when the operator gave
    none. As in Nova, None puts no ``dev_type`` in the request spec, and it is the
    pools (``pci.stats``) that hand out a PF only to a spec asking for ``type-PF``
    and a vDPA device only to one asking for ``vdpa``: so an alias without a
    device_type is served by ``type-PCI`` and ``type-VF`` devices.
    """

    name: str
    device_type: str | None
    numa_policy: str
    specs: tuple[dict[str, str], ...]

    def request_specs(self):
        """Fresh copies of ``specs``, each with ``dev_type`` when the alias has a type."""
        device_type = {"dev_type": self.device_type} if self.device_type else {}
        return [{**spec, **device_type} for spec in self.specs]


def parse_aliases(values):
    """The aliases ``[pci] alias`` defines, by name.

    Each value is a JSON dict or a JSON list of dicts with the keys ``name``,
    ``vendor_id`` and ``product_id`` (required), ``device_type`` (not ``vdpa``) and
    ``numa_policy`` (default ``legacy``). Definitions repeating a name OR their specs together and
    must agree on device_type and numa_policy (an absent device_type differs from a
    given one). Raises ``PciConfigError`` naming the entry, the bad key and value.
    """
    aliases = {}
    for entry in values:
        for definition in _definitions(entry):
            alias = _alias(entry, definition)
            aliases[alias.name] = _merged(entry, aliases.get(alias.name), alias)
    return aliases


def _config_error(entry, reason):
    return exception.PciConfigError(option="alias", entry=entry, reason=reason)


def _definitions(entry):
    try:
        loaded = json.loads(entry)
    except ValueError as error:
        raise _config_error(entry, f"not valid JSON ({error})") from None
    definitions = loaded if isinstance(loaded, list) else [loaded]
    if not all(isinstance(definition, dict) for definition in definitions):
        raise _config_error(entry, "expected a JSON dict or a JSON list of dicts")
    return definitions


def _alias(entry, definition):
    unknown = sorted(set(definition) - set(_ALIAS_KEYS))
    if unknown:
        raise _config_error(entry, f"unknown key {unknown[0]!r}; known keys are {_ALIAS_KEYS}")
    name = _alias_name(entry, definition)
    spec = {key: _pci_id(entry, key, definition[key]) for key in _ID_KEYS if key in definition}
    missing = [key for key in _ID_KEYS if key not in spec]
    if missing:
        raise _config_error(
            entry,
            f"alias {name!r} has no {' and no '.join(missing)}; an alias names the "
            "vendor_id and product_id of the devices it asks for (Nova refuses it too)",
        )
    if definition.get("device_type") == fields.PciDeviceType.VDPA:
        raise _config_error(
            entry,
            f"alias {name!r} asks for vdpa devices, which are not requested by alias "
            "(in Nova, by a vDPA port; pcisim has no ports)",
        )
    return Alias(
        name=name,
        device_type=_choice(entry, definition, "device_type", ALIAS_DEVICE_TYPES, None),
        numa_policy=_choice(entry, definition, "numa_policy", NUMA_POLICIES, DEFAULT_NUMA_POLICY),
        specs=(spec,),
    )


def _alias_name(entry, definition):
    """The stripped name; it may not hold ``:`` or ``,``, which separate request items."""
    if "name" not in definition:
        raise _config_error(entry, "the key 'name' is missing")
    name = definition["name"]
    if not isinstance(name, str) or not name.strip():
        raise _config_error(entry, f"name {name!r} is not a non-empty string")
    if any(separator in name for separator in _REQUEST_SEPARATORS):
        raise _config_error(entry, f"name {name!r} contains ':' or ','")
    return name.strip()


def _choice(entry, definition, key, choices, default):
    if key not in definition:
        return default
    value = definition[key]
    if value not in choices:
        raise _config_error(entry, f"{key} {value!r} is not one of {choices}")
    return value


def _pci_id(entry, key, value):
    if not ids.is_pci_id(value):
        raise _config_error(entry, f"{key} {value!r} is not {ids.FORM}")
    return value.lower()


def _merged(entry, known, alias):
    if known is None:
        return alias
    for key in ("device_type", "numa_policy"):
        if getattr(known, key) != getattr(alias, key):
            raise _config_error(
                entry,
                f"alias {alias.name!r} is defined with {key} {getattr(known, key)!r} "
                f"and {getattr(alias, key)!r}; repeated definitions must agree",
            )
    return dataclasses.replace(known, specs=known.specs + alias.specs)


def parse_request(request, aliases):
    """``(alias, count)`` for each item of ``request``, in order.

    ``request`` is text, ``"name:count[,name:count]"`` with whitespace allowed
    around names, counts and items, or a list of ``{"alias": name, "count": count}``
    dicts (JSON: count is an integer, not a string). The count is always required,
    as in Nova's flavor extra spec: a bare ``"gpu"`` is an error, not one device.

    An alias may be named more than once (``"gpu:1,gpu:2"``): as in Nova, each item is
    a request of its own.

    Raises ``PciAliasNotFound`` for a name ``aliases`` lacks, and
    ``InvalidPciRequest`` for an empty request or item, a missing name, a count that
    is not a positive integer or is above ``MAX_COUNT``, or a malformed list item.
    """
    if isinstance(request, str):
        pairs = _pairs_from_text(request)
    elif isinstance(request, list):
        pairs = [_pair_from_dict(request, item) for item in request]
    else:
        raise _invalid(request, "expected text or a list of dicts")
    if not pairs:
        raise _invalid(request, "it is empty")
    return _resolved(request, pairs, aliases)


def _invalid(request, reason):
    return exception.InvalidPciRequest(request=request, reason=reason)


def _pairs_from_text(text):
    if not text.strip():
        return []
    return [_pair_from_item(text, item.strip()) for item in text.split(",")]


def _pair_from_item(text, item):
    if not item:
        raise _invalid(text, "it has an empty item")
    name, colon, count = (part.strip() for part in item.partition(":"))
    if not colon:
        raise _invalid(text, f"item {item!r} has no count; write '{item}:1' for one device")
    if not _DIGITS.fullmatch(count):
        raise _invalid(text, f"count {count!r} of {name!r} is not a positive integer")
    return name, int(count)


def _pair_from_dict(request, item):
    if not isinstance(item, dict) or set(item) != {"alias", "count"}:
        raise _invalid(request, f"item {item!r} is not a dict of exactly 'alias' and 'count'")
    name, count = item["alias"], item["count"]
    if not isinstance(name, str):
        raise _invalid(request, f"alias {name!r} is not a string")
    if type(count) is not int:
        raise _invalid(request, f"count {count!r} of {name!r} is not a positive integer")
    return name, count


def _resolved(request, pairs, aliases):
    for name, count in pairs:
        if not name:
            raise _invalid(request, "an item has no alias name")
        if count < 1:
            raise _invalid(request, f"count {count!r} of {name!r} is not a positive integer")
        if count > MAX_COUNT:
            raise _invalid(request, f"count {count} of {name!r} is above {MAX_COUNT}")
        if name not in aliases:
            raise exception.PciAliasNotFound(alias=name)
    return [(aliases[name], count) for name, count in pairs]


def build_requests(request, aliases, numa_policy=None):
    """One ``InstancePCIRequest`` per item of ``request`` (see :func:`parse_request`).

    Each carries the count, the alias's specs (with ``dev_type`` when the alias has
    a device_type), the alias name and NUMA policy, and a fresh ``request_id``. A
    ``numa_policy`` given (a flavor's ``hw:pci_numa_affinity_policy``) overrides every
    alias's, as in Nova.
    """
    return [
        InstancePCIRequest(
            count=count,
            spec=alias.request_specs(),
            alias_name=alias.name,
            request_id=str(uuid.uuid4()),
            numa_policy=numa_policy or alias.numa_policy,
        )
        for alias, count in parse_request(request, aliases)
    ]


def build_instance_requests(context, instance_uuid, request, aliases, numa_policy=None):
    """The ``InstancePCIRequests`` of one instance, from :func:`build_requests`."""
    return InstancePCIRequests(
        context,
        instance_uuid=instance_uuid,
        requests=build_requests(request, aliases, numa_policy),
    )


def spec_matches(spec, candidate):
    """Whether ``candidate`` has every key of ``spec`` with an equal value.

    ``candidate`` is a device's or pool's dict of strings: ``vendor_id``,
    ``product_id``, ``dev_type`` and its tags, either at the top level (as in a
    pool) or in a nested ``tags`` dict. As in Nova, text values compare ignoring
    case (a device_spec's ``physical_network: PhysNet1`` serves a request for
    ``physnet1``); keys compare exactly; an empty spec matches anything.
    """
    tags = candidate.get("tags") or {}
    return all(
        _folded(candidate.get(key, tags.get(key))) == _folded(value) for key, value in spec.items()
    )


def _folded(value):
    return value.lower() if isinstance(value, str) else value
