"""An inventory's device and a hypervisor report entry are one thing, checked by one schema.

The same bad entry, put in an inventory and in a report, is refused for the same reason,
named by key, and each names the entry by its address.
"""

import pytest

from pcisim import exception
from pcisim.compute.inventory import Where, node_inventory
from pcisim.pci.report import MAX_NUMA_NODES, normalized_report

ADDRESS = "0000:80:00.0"
GPU = {"address": ADDRESS, "vendor_id": "10de", "product_id": "1eb8", "dev_type": "type-PCI"}
VF = {**GPU, "dev_type": "type-VF", "parent_addr": "0000:10:00.0"}
BAD_ENTRIES = {
    "an unknown key": {**GPU, "numa": 0},
    "a required key missing": {key: GPU[key] for key in ("address", "vendor_id", "dev_type")},
    "an id of 3 digits": {**GPU, "vendor_id": "10d"},
    "an id in 0x form": {**GPU, "product_id": "0x1e"},
    "an unknown dev_type": {**GPU, "dev_type": "type-GPU"},
    "a VF without its parent": {**VF, "parent_addr": None},
    "a VF of a malformed parent": {**VF, "parent_addr": "0000:10:00"},
    "a VF its own parent": {**VF, "parent_addr": ADDRESS},
    "a type-PCI with a parent": {**VF, "dev_type": "type-PCI"},
    "a negative numa_node": {**GPU, "numa_node": -1},
    "a numa_node of 1.0": {**GPU, "numa_node": 1.0},
    "a label that is not text": {**GPU, "label": 7},
    "a dev_id too long": {**GPU, "dev_id": "x" * 256},
}


def inventory_refusal(entry):
    """The inventory's reason, split into the entry it names and what it says of it."""
    node = {"numa_nodes": MAX_NUMA_NODES, "pci_devices": [entry]}
    with pytest.raises(exception.InvalidInventory) as raised:
        node_inventory(node, Where("test"))
    place, reason = raised.value.kwargs["reason"].split(": ", 1)
    return place, reason


def report_refusal(entry):
    """The report's refusal: the entry it names and what it says of it."""
    with pytest.raises(exception.InvalidPciDeviceReport) as raised:
        normalized_report(entry)
    return raised.value.kwargs["entry"], raised.value.kwargs["reason"]


@pytest.mark.parametrize("entry", BAD_ENTRIES.values(), ids=BAD_ENTRIES)
def test_the_same_bad_entry_is_refused_for_the_same_reason_by_key(entry):
    _, in_inventory = inventory_refusal(entry)
    _, in_report = report_refusal(entry)

    assert in_inventory == in_report
    assert in_report.startswith("key ")


@pytest.mark.parametrize("entry", BAD_ENTRIES.values(), ids=BAD_ENTRIES)
def test_both_name_the_bad_entry_by_its_address(entry):
    in_inventory, _ = inventory_refusal(entry)
    in_report, _ = report_refusal(entry)

    assert in_inventory == f"pci_devices[0] ({ADDRESS})"
    assert in_report == ADDRESS
