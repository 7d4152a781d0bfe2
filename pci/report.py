"""The hypervisor's report of a PCI device, as the tracker consumes it.

A report is a list of dicts, one per device: ``address``, ``vendor_id``,
``product_id`` and ``dev_type`` (``type-PCI``, ``type-PF``, ``type-VF``, ``vdpa``) are
required; ``parent_addr`` (a VF's PF, required of a VF or vDPA device and of no other),
``numa_node``, ``label`` and ``dev_id`` are not.
"""

from pcisim import exception
from pcisim.objects import fields
from pcisim.pci import ids
from pcisim.pci.address import PciAddress

REQUIRED_FIELDS = ("address", "vendor_id", "product_id", "dev_type")
CHILD_TYPES = frozenset({fields.PciDeviceType.SRIOV_VF, fields.PciDeviceType.VDPA})
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


def report_of(device):
    """A tracked device as a hypervisor report entry (for device_spec matching)."""
    return {"address": device.address, **{name: getattr(device, name) for name in REPORTED_FIELDS}}


def normalized_report(entry):
    """A hypervisor report entry checked and normalised.

    Raises ``InvalidPciDeviceReport`` naming the entry (by its address when it has a
    usable one) and what is wrong with it: not a mapping, a required field missing, an
    unknown ``dev_type``, a malformed address or id, a VF or vDPA device without its
    parent or another device with one, a NUMA node that is not one, or a ``label`` or
    ``dev_id`` that is not text of at most 255 characters.
    """
    if not isinstance(entry, dict):
        raise _invalid(entry, "a device report must be a mapping")
    missing = [name for name in REQUIRED_FIELDS if entry.get(name) is None]
    if missing:
        raise _invalid(entry, f"missing {', '.join(missing)}")
    dev_type = entry["dev_type"]
    if not isinstance(dev_type, str) or dev_type not in fields.PciDeviceType.ALL:
        raise _invalid(entry, f"unknown dev_type {dev_type!r}")
    values = {"address": _address(entry, "address")}
    for name in ("vendor_id", "product_id"):
        values[name] = _pci_id(entry, name)
    values["parent_addr"] = _parent_addr(entry, values["address"])
    values["numa_node"] = _numa_node(entry)
    values["dev_type"] = dev_type
    values["label"] = _text(entry, "label") or f"label_{values['vendor_id']}_{values['product_id']}"
    values["dev_id"] = _text(entry, "dev_id")
    return values


def _invalid(entry, reason):
    address = entry.get("address") if isinstance(entry, dict) else None
    name = address if isinstance(address, str) and address else repr(entry)[:120]
    return exception.InvalidPciDeviceReport(entry=name, reason=reason)


def _address(entry, name):
    try:
        return str(PciAddress.parse(entry[name]))
    except exception.InvalidPciAddress as error:
        raise _invalid(entry, f"{name}: {error.message}") from None


def _parent_addr(entry, address):
    parent = entry.get("parent_addr")
    is_child = entry["dev_type"] in CHILD_TYPES
    if parent in (None, ""):
        if is_child:
            raise _invalid(entry, f"a {entry['dev_type']} needs its parent_addr (its PF)")
        return None
    if not is_child:
        raise _invalid(entry, f"a {entry['dev_type']} has no parent_addr")
    parent = _address(entry, "parent_addr")
    if parent == address:
        raise _invalid(entry, "parent_addr is the device itself")
    return parent


def _pci_id(entry, name):
    value = entry[name]
    if not ids.is_pci_id(value):
        raise _invalid(entry, f"{name} {value!r} is not {ids.FORM}")
    return value.lower()


def _numa_node(entry):
    value = entry.get("numa_node")
    if value is None or (
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_NUMA_NODES
    ):
        return value
    raise _invalid(entry, f"numa_node {value!r} is not a node number (0..{MAX_NUMA_NODES - 1})")


def _text(entry, name):
    value = entry.get(name)
    if value is None or (isinstance(value, str) and len(value) <= MAX_TEXT):
        return value
    raise _invalid(entry, f"{name} {value!r:.40} is not text of at most {MAX_TEXT} characters")
