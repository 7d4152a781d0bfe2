"""A claim that a device of the plan refuses claims nothing at all.

Found by the PCI state machine (tests/functional/pci_machine.py): a VF pooled free
under an allocated PF (see tests/unit/objects/test_vfs_joining_a_held_pf.py) made
``consume_requests`` raise half-way, and the VFs it had claimed before stayed out of
their pools, held by nobody, until the compute restarted.
"""

import uuid

import pytest

from pcisim import exception
from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.instance_pci_requests import InstancePCIRequest
from pcisim.objects.pci_device import PciDevice
from pcisim.pci.stats import PciDeviceStats


def _device(address, dev_type="type-VF", parent=None):
    return PciDevice(
        compute_node_id=1,
        address=address,
        vendor_id="8086",
        product_id="1521" if dev_type == "type-PF" else "1520",
        dev_type=dev_type,
        status=S.AVAILABLE,
        label="l",
        numa_node=0,
        parent_addr=parent,
        instance_uuid=None,
        request_id=None,
    )


def _nic(stats, bus, vfs):
    pf = _device(f"0000:{bus}:00.0", "type-PF")
    children = [_device(f"0000:{bus}:10.{f}", parent=pf.address) for f in range(vfs)]
    for vf in children:
        vf.link_parent(pf)
    for device in (pf, *children):
        stats.update_device(device)
    return pf, children


def _vf_request(count):
    spec = {"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"}
    return InstancePCIRequest(
        count=count, spec=[spec], alias_name="vf", request_id=str(uuid.uuid4())
    )


def _pools(stats):
    return sorted((p.dev_type, p.parent_addr, sorted(p.devices)) for p in stats.pools())


@pytest.fixture
def refusing_vf_last():
    """Two free VFs of one PF, then a VF pooled free under another, allocated, PF."""
    stats = PciDeviceStats()
    held_pf, _ = _nic(stats, "10", vfs=0)
    free_pf, free_vfs = _nic(stats, "11", vfs=2)
    for changed in held_pf.allocate("pf-owner"):
        stats.update_device(changed)
    stray = _device("0000:10:10.0", parent=held_pf.address)
    stray.link_parent(held_pf)
    stats.update_device(stray)  # NOTE: its pool comes after the free PF's VF pool
    return stats, free_pf, free_vfs


def test_a_refused_device_fails_the_request_as_not_fitting(refusing_vf_last):
    stats, _, _ = refusing_vf_last
    with pytest.raises(exception.PciDeviceRequestFailed, match="allocated"):
        stats.consume_requests([_vf_request(3)], "vf-owner")


def test_the_devices_claimed_before_the_refusal_are_free_and_pooled_again(refusing_vf_last):
    stats, free_pf, free_vfs = refusing_vf_last
    before = _pools(stats)
    with pytest.raises(exception.PciDeviceRequestFailed):
        stats.consume_requests([_vf_request(3)], "vf-owner")
    assert [(d.status, d.instance_uuid) for d in (free_pf, *free_vfs)] == [(S.AVAILABLE, None)] * 3
    assert _pools(stats) == before
