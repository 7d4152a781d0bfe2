"""Every reader of a vendor or product id takes the same ids and refuses the same text.

The readers: a device of an inventory, the hypervisor's report, a ``[pci] alias`` and a
``[pci] device_spec``. Each reader below returns the id as it keeps it, or raises its own
error. (An inventory also reads an unquoted YAML ``8086``, a number, as written:
``test_inventory.py`` has it.)
"""

import json

import pytest

from pcisim import exception
from pcisim.compute.inventory import Where, node_inventory
from pcisim.pci.devspec import DeviceSpec
from pcisim.pci.report import normalized_report
from pcisim.pci.request import parse_aliases

GPU = {"address": "0000:80:00.0", "vendor_id": "10de", "product_id": "1eb8", "dev_type": "type-PCI"}


def read_by_inventory(pci_id):
    inventory = node_inventory({"pci_devices": [{**GPU, "vendor_id": pci_id}]}, Where("test"))
    return inventory.report()[0]["vendor_id"]


def read_by_report(pci_id):
    return normalized_report({**GPU, "vendor_id": pci_id})["vendor_id"]


def read_by_alias(pci_id):
    aliases = parse_aliases(
        [json.dumps({"name": "gpu", "vendor_id": pci_id, "product_id": "1eb8"})]
    )
    return aliases["gpu"].specs[0]["vendor_id"]


def read_by_device_spec(pci_id):
    """The id of the reported devices the spec selects, among the id's spellings."""
    spec = DeviceSpec({"vendor_id": pci_id})
    spellings = {pci_id.lower(), pci_id.upper()}
    (selected,) = [kept for kept in spellings if spec.match({**GPU, "vendor_id": kept})]
    return selected


READERS = {
    "inventory": (read_by_inventory, exception.InvalidInventory),
    "report": (read_by_report, exception.InvalidPciDeviceReport),
    "alias": (read_by_alias, exception.PciConfigError),
    "device_spec": (read_by_device_spec, exception.PciConfigError),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    ("written", "kept"), [("8086", "8086"), ("ABCD", "abcd"), ("10De", "10de")]
)
def test_four_hex_digits_in_any_case_are_kept_in_lowercase(reader, written, kept):
    read, _ = READERS[reader]
    assert read(written) == kept


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    "written", ["808", "a", "80861", "08086", "0x8086", "0x86", "80g6", "", " 8086", "8086\n"]
)
def test_text_that_is_not_four_hex_digits_is_refused(reader, written):
    read, refusal = READERS[reader]
    with pytest.raises(refusal) as raised:
        read(written)
    assert "is not" in raised.value.message and "4 hex digits" in raised.value.message


@pytest.mark.parametrize("reader", ["report", "alias", "device_spec"])
def test_a_number_is_not_an_id(reader):
    read, refusal = READERS[reader]
    with pytest.raises(refusal):
        read(8086)
