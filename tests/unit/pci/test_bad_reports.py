"""Malformed entries of a hypervisor report: skipped by name, the rest tracked and saved.

Each entry goes to a real tracker with a good report (a PF and its VF) and is saved
through the conductor: the good devices are rows, the bad entry is not, and the warning
names the entry (by its address when it has one) and what is wrong with it.
``test_manager.py`` has the first cases; this table extends them.
"""

import pytest

from pcisim import exception
from pcisim.objects.pci_device import PciDeviceList
from pcisim.pci.manager import PciDevTracker
from pcisim.pci.report import normalized_report
from tests import object_factories
from tests.unit.pci import inventory
from tests.unit.pci.test_manager import SPECS

ADDRESS = "0000:99:00.1"
GOOD = {"address": ADDRESS, "vendor_id": "8086", "product_id": "1520", "dev_type": "type-PCI"}
VF = {**GOOD, "dev_type": "type-VF", "parent_addr": inventory.pf_address(0)}

# (case, entry, what the warning says of it)
REPORT_CASES = [
    ("entry null", None, "None: a device is a mapping"),
    ("entry a list", [ADDRESS], "a device is a mapping"),
    ("an unknown key", {**GOOD, "numa": 0}, "key 'numa': unknown key; the keys are address,"),
    ("address missing", {**GOOD, "address": None}, "key 'address': is required"),
    ("address a number", {**GOOD, "address": 10}, "key 'address': 10 is not a PCI address"),
    ("address empty", {**GOOD, "address": ""}, "key 'address': expected the form dddd:bb:ss.f"),
    ("address of five fields", {**GOOD, "address": "0000:99:00:00.1"}, "dddd:bb:ss.f in '0000"),
    ("dev_type a list", {**GOOD, "dev_type": ["type-PCI"]}, "['type-PCI'] is not one of type-"),
    ("dev_type in other case", {**GOOD, "dev_type": "TYPE-PCI"}, "'TYPE-PCI' is not one of"),
    ("vendor_id a boolean", {**GOOD, "vendor_id": True}, "'vendor_id': True is not 4 hex digits"),
    ("vendor_id of 5 digits", {**GOOD, "vendor_id": "80860"}, "'80860' is not 4 hex digits"),
    ("product_id a list", {**GOOD, "product_id": ["1520"]}, "'product_id': ['1520'] is not 4"),
    ("VF without parent", {**VF, "parent_addr": None}, "'parent_addr': is required for a type-VF"),
    ("vdpa without parent", {**VF, "dev_type": "vdpa", "parent_addr": None}, "required for a vdpa"),
    ("VF of an empty parent", {**VF, "parent_addr": ""}, "'parent_addr': expected the form"),
    ("VF its own parent", {**VF, "parent_addr": ADDRESS}, "'parent_addr': is the device itself"),
    ("VF of a bad parent", {**VF, "parent_addr": "0000:99"}, "dddd:bb:ss.f in '0000:99'"),
    ("type-PCI with a parent", {**VF, "dev_type": "type-PCI"}, "only a type-VF or vdpa has one"),
    ("PF with a parent", {**VF, "dev_type": "type-PF"}, "'parent_addr': only a type-VF or vdpa"),
    ("numa_node negative", {**GOOD, "numa_node": -1}, "-1 is not a NUMA node number (0..1023)"),
    (
        "numa_node past the last",
        {**GOOD, "numa_node": 2**40},
        "is not a NUMA node number (0..1023)",
    ),
    ("numa_node a boolean", {**GOOD, "numa_node": True}, "'numa_node': True is not a NUMA node"),
    ("numa_node a float", {**GOOD, "numa_node": 1.0}, "'numa_node': 1.0 is not a NUMA node"),
    ("label a number", {**GOOD, "label": 7}, "key 'label': 7 is not a string"),
    ("label too long", {**GOOD, "label": "x" * 256}, "'label': is 256 characters long, over 255"),
    ("dev_id a mapping", {**GOOD, "dev_id": {"a": 1}}, "key 'dev_id': {'a': 1} is not a string"),
]


@pytest.fixture
def node(conductor, ctxt):
    return object_factories.compute_node(ctxt)


@pytest.mark.parametrize(
    ("entry", "says"),
    [case[1:] for case in REPORT_CASES],
    ids=[case[0] for case in REPORT_CASES],
)
def test_a_malformed_entry_is_named_skipped_and_never_saved(node, ctxt, caplog, entry, says):
    tracker = PciDevTracker(ctxt, node, SPECS)

    tracker.update_devices_from_hypervisor_resources([entry, *inventory.sriov_report(1, 1)])
    tracker.save()

    saved = {device.address for device in PciDeviceList.get_by_compute_node(ctxt, node.id)}
    assert saved == {inventory.pf_address(0), inventory.vf_address(0, 0)}
    assert "skipping malformed PCI device report" in caplog.text
    assert says in caplog.text


ADDRESSED = [case for case in REPORT_CASES if isinstance(case[1], dict) and case[1]["address"]]


@pytest.mark.parametrize(
    "entry",
    [case[1] for case in ADDRESSED if isinstance(case[1]["address"], str)],
    ids=[case[0] for case in ADDRESSED if isinstance(case[1]["address"], str)],
)
def test_the_error_names_the_entry_by_its_address(entry):
    with pytest.raises(exception.InvalidPciDeviceReport) as raised:
        normalized_report(entry)

    assert raised.value.message.startswith(f"Invalid PCI device report {entry['address']}: ")


def test_an_entry_equal_to_a_valid_one_but_of_other_types_is_still_refused():
    normalized_report({**GOOD, "numa_node": 1})

    with pytest.raises(exception.InvalidPciDeviceReport):
        normalized_report({**GOOD, "numa_node": True})


def test_changing_a_normalised_entry_changes_no_later_one():
    normalized_report(GOOD)["label"] = "changed"

    assert normalized_report(GOOD)["label"] == "label_8086_1520"
