"""The hypervisor's report of a PCI device: what an entry is, and how the tracker reads one.

A report is a list of entries, one per device. `entry_schema` is the one definition of an
entry, as a JSON Schema: ``address``, ``vendor_id``, ``product_id`` and ``dev_type``
(``type-PCI``, ``type-PF``, ``type-VF``, ``vdpa``) are required; ``parent_addr`` (the PF
of a VF or vDPA device, required of them and of no other device), ``numa_node``,
``label`` and ``dev_id`` are not; a key given as null is left out. The tracker checks
the hypervisor's report with it (`normalized_report`) and the simulated hypervisor its
inventories (``compute.inventory``), both through `entry_problem`, which also checks what
a schema cannot: that a device is not its own parent.
"""

import dataclasses
import functools

import jsonschema

from pcisim import exception
from pcisim.objects.fields import PciDeviceType
from pcisim.pci import ids
from pcisim.pci.address import PciAddress

REQUIRED_FIELDS = ("address", "vendor_id", "product_id", "dev_type")
CHILD_TYPES = frozenset({PciDeviceType.SRIOV_VF, PciDeviceType.VDPA})
MAX_NUMA_NODES = 1024  # NOTE: Linux's MAX_NUMNODES
MAX_TEXT = 255  # NOTE: the label and dev_id columns
REPORTED_FIELDS = (
    "vendor_id",
    "product_id",
    "dev_type",
    "parent_addr",
    "numa_node",
    "label",
    "dev_id",
)
ENTRY_FIELDS = ("address", *REPORTED_FIELDS)


def report_of(device):
    """A tracked device as a hypervisor report entry (for device_spec matching)."""
    return {"address": device.address, **{name: getattr(device, name) for name in REPORTED_FIELDS}}


def entry_schema(numa_nodes=MAX_NUMA_NODES):
    """The JSON Schema (Draft 2020-12) of an entry from a host of ``numa_nodes`` NUMA nodes.

    A property's ``description`` is what a refusal says a bad value is not. Its formats
    are `pci.ids` ids and `PciAddress` addresses.
    """
    address = {"type": "string", "format": "pci-address", "description": "a PCI address"}
    pci_id = {"type": "string", "format": "pci-id", "description": ids.FORM}
    text = {"type": "string", "maxLength": MAX_TEXT, "description": "a string"}
    last_numa_node = numa_nodes - 1
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(REQUIRED_FIELDS),
        "properties": {
            "address": address,
            "vendor_id": pci_id,
            "product_id": pci_id,
            "dev_type": {
                "enum": list(PciDeviceType.ALL),
                "description": f"one of {', '.join(PciDeviceType.ALL)}",
            },
            "parent_addr": address,
            "numa_node": {
                "type": "integer",
                "minimum": 0,
                "maximum": last_numa_node,
                "description": f"a NUMA node number (0..{last_numa_node})",
            },
            "label": text,
            "dev_id": text,
        },
        "if": {"required": ["dev_type"], "properties": {"dev_type": {"enum": sorted(CHILD_TYPES)}}},
        "then": {"required": ["parent_addr"]},
        "else": {"not": {"required": ["parent_addr"]}},
    }


@dataclasses.dataclass(frozen=True)
class EntryProblem:
    """What is wrong with an entry: ``key`` names the key, or is None for the whole entry."""

    key: object
    reason: str

    def __str__(self):
        return self.reason if self.key is None else f"key {self.key!r}: {self.reason}"


def entry_problem(entry, numa_nodes=MAX_NUMA_NODES):
    """The first thing wrong with ``entry``, or None when it is an entry of `entry_schema`.

    The schema is checked in its order (a mapping, no unknown key, the required keys,
    each value in turn, ``parent_addr`` given where it belongs), then that the device is
    not its own parent.
    """
    key = _cache_key(entry)
    if key is None:
        return _first_problem(entry, numa_nodes)
    return _first_problem_once(key, numa_nodes)


def normal_entry(entry):
    """An entry `entry_problem` finds nothing wrong with, as the tracker stores it: every
    key present, the addresses and ids in lowercase, the label defaulted."""
    vendor_id, product_id = entry["vendor_id"].lower(), entry["product_id"].lower()
    parent_addr = entry.get("parent_addr")
    return {
        "address": _canonical(entry["address"]),
        "vendor_id": vendor_id,
        "product_id": product_id,
        "dev_type": entry["dev_type"],
        "parent_addr": None if parent_addr is None else _canonical(parent_addr),
        "numa_node": entry.get("numa_node"),
        "label": entry.get("label") or f"label_{vendor_id}_{product_id}",
        "dev_id": entry.get("dev_id"),
    }


def normalized_report(entry):
    """A hypervisor report entry checked (`entry_problem`) and normalised (`normal_entry`).

    Raises ``InvalidPciDeviceReport`` naming the entry (by its address when it has one
    as text) and what is wrong with it, by key: ``key 'numa_node': -1 is not a NUMA node
    number (0..1023)``.
    """
    problem = entry_problem(entry)
    if problem is not None:
        raise exception.InvalidPciDeviceReport(entry=_name(entry), reason=str(problem))
    return normal_entry(entry)


def _first_problem(entry, numa_nodes):
    given = _given(entry)
    error = next(_validator(numa_nodes).iter_errors(given), None)
    if error is not None:
        return _problem(error)
    return _own_parent_problem(given)


# NOTE: the same entries come back again and again: in the report on every periodic run,
# and in the inventories of nodes of one layout. Checking one against the schema takes
# ~60 us, a lookup ~1.5 us: an unchanged report of 1,088 devices (bench.tracker P2) took
# 0.08 s uncached, 0.016 s before the schema; 1,000 nodes of 2 PFs x 8 VFs 2 s to load
# uncached, 0.2 s before the schema.
@functools.lru_cache(maxsize=16384)
def _first_problem_once(key, numa_nodes):
    return _first_problem({name: value for name, _, value in key}, numa_nodes)


def _cache_key(entry):
    """``entry``'s items, each with its value's type (else True and 1.0 would hit 1), or
    None when it is not a dict of hashable values."""
    if not isinstance(entry, dict):
        return None
    key = tuple((name, type(value), value) for name, value in entry.items())
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _name(entry):
    address = entry.get("address") if isinstance(entry, dict) else None
    return address if isinstance(address, str) and address else repr(entry)[:120]


def _canonical(address):
    return str(PciAddress.parse(address))


def _given(entry):
    """``entry`` without the keys given as null: they count as left out."""
    if not isinstance(entry, dict):
        return entry
    return {key: value for key, value in entry.items() if value is not None}


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("pci-id")(ids.is_pci_id)
_FORMATS.checks("pci-address", raises=exception.InvalidPciAddress)(PciAddress.parse)
# NOTE: JSON Schema counts 1.0 as an integer; a NUMA node number is an int, and not a bool.
_VALIDATOR_CLASS = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


@functools.cache
def _validator(numa_nodes):
    return _VALIDATOR_CLASS(entry_schema(numa_nodes), format_checker=_FORMATS)


def _problem(error):
    """The `EntryProblem` a jsonschema error is, named by key."""
    if error.validator == "type" and not error.path:
        return EntryProblem(None, "a device is a mapping")
    if error.validator == "additionalProperties":
        unknown = next(key for key in error.instance if key not in ENTRY_FIELDS)
        return EntryProblem(unknown, f"unknown key; the keys are {', '.join(ENTRY_FIELDS)}")
    if error.validator == "required":
        return _missing(error)
    if error.validator == "not":
        return EntryProblem("parent_addr", f"only a {' or '.join(sorted(CHILD_TYPES))} has one")
    return _bad_value(error)


def _missing(error):
    key = next(key for key in error.validator_value if key not in error.instance)
    if error.relative_schema_path[0] == "then":
        return EntryProblem(key, f"is required for a {error.instance['dev_type']}")
    return EntryProblem(key, "is required")


def _bad_value(error):
    """The problem with the one value ``error.path`` names."""
    key, value = error.path[0], error.instance
    if error.cause is not None:
        return EntryProblem(key, f"{error.cause.kwargs['reason']} in {value!r}")
    if error.validator == "maxLength":
        return EntryProblem(key, f"is {len(value)} characters long, over {error.validator_value}")
    return EntryProblem(key, f"{value!r} is not {error.schema['description']}")


def _own_parent_problem(entry):
    """A device named as its own parent: a schema cannot compare two values."""
    parent_addr = entry.get("parent_addr")
    if parent_addr is not None and _canonical(parent_addr) == _canonical(entry["address"]):
        return EntryProblem("parent_addr", "is the device itself")
    return None
