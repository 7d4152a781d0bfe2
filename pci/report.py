"""The hypervisor's report of a PCI device, as the tracker consumes it.

A report is a list of dicts, one per device: ``address``, ``vendor_id``,
``product_id`` and ``dev_type`` (``type-PCI``, ``type-PF``, ``type-VF``, ``vdpa``) are
required; ``parent_addr`` (a VF's PF), ``numa_node``, ``label`` and ``dev_id`` are not.
"""

from objects import fields
from pci.address import PciAddress
from pcisim import exception

REQUIRED_FIELDS = ("address", "vendor_id", "product_id", "dev_type")
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
    """A hypervisor report entry checked and normalised; ``InvalidInput`` if malformed."""
    if not isinstance(entry, dict):
        raise exception.InvalidInput(reason="a device report must be a mapping")
    missing = [name for name in REQUIRED_FIELDS if not entry.get(name)]
    if missing:
        raise exception.InvalidInput(reason=f"missing {', '.join(missing)}")
    if entry["dev_type"] not in fields.PciDeviceType.ALL:
        raise exception.InvalidInput(reason=f"unknown dev_type {entry['dev_type']!r}")
    values = {"address": str(PciAddress.parse(entry["address"]))}
    for name in ("vendor_id", "product_id"):
        values[name] = _hex4(name, entry[name])
    parent = entry.get("parent_addr")
    values["parent_addr"] = str(PciAddress.parse(parent)) if parent else None
    values["numa_node"] = _numa_node(entry.get("numa_node"))
    values["dev_type"] = entry["dev_type"]
    values["label"] = entry.get("label") or f"label_{values['vendor_id']}_{values['product_id']}"
    values["dev_id"] = entry.get("dev_id")
    return values


def _hex4(name, value):
    text = str(value).lower()
    if len(text) != 4 or any(c not in "0123456789abcdef" for c in text):
        raise exception.InvalidInput(reason=f"{name} {value!r} is not 4 hex digits")
    return text


def _numa_node(value):
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise exception.InvalidInput(reason=f"numa_node {value!r} is not a node number")
