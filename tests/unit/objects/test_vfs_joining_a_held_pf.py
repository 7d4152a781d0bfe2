"""A VF the tracker learns of while its PF is held takes the status the PF imposes.

Found by the PCI state machine (tests/functional/pci_machine.py): a VF hot-plugged
back while its PF was allocated was created available, pooled, and refused by the
claim that the scheduler then sent for it.
"""

import pytest

from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.pci_device import PciDevice
from pcisim.objects.pci_device_state import vfs_joining


def _device(address, dev_type, status=S.AVAILABLE, owner=None):
    return PciDevice(
        compute_node_id=1,
        address=address,
        vendor_id="8086",
        product_id="1521" if dev_type == "type-PF" else "1520",
        dev_type=dev_type,
        status=status,
        label="l",
        instance_uuid=owner,
        request_id=None,
    )


def _pf_and_vfs(pf_status, vf_statuses):
    owner = "instance-1" if pf_status in (S.CLAIMED, S.ALLOCATED) else None
    pf = _device("0000:0a:00.0", "type-PF", pf_status, owner)
    vfs = [_device(f"0000:0a:10.{i}", "type-VF", s) for i, s in enumerate(vf_statuses)]
    for vf in vfs:
        vf.link_parent(pf)
    return pf, vfs


@pytest.mark.parametrize(
    ("pf_status", "busy"), [(S.ALLOCATED, S.UNAVAILABLE), (S.CLAIMED, S.UNCLAIMABLE)]
)
def test_an_available_vf_of_a_held_pf_joins_its_busy_siblings(pf_status, busy):
    pf, (sibling, newcomer) = _pf_and_vfs(pf_status, [busy, S.AVAILABLE])
    assert vfs_joining(pf) == [newcomer]
    assert [sibling.status, newcomer.status] == [busy, busy]


@pytest.mark.parametrize("pf_status", [S.AVAILABLE, S.UNCLAIMABLE, S.UNAVAILABLE])
def test_the_vfs_of_a_pf_that_follows_them_are_left_alone(pf_status):
    pf, vfs = _pf_and_vfs(pf_status, [S.AVAILABLE, S.CLAIMED])
    assert vfs_joining(pf) == []
    assert [vf.status for vf in vfs] == [S.AVAILABLE, S.CLAIMED]


def test_vfs_that_are_gone_are_left_alone():
    pf, vfs = _pf_and_vfs(S.ALLOCATED, [S.REMOVED, S.DELETED])
    assert vfs_joining(pf) == []
    assert [vf.status for vf in vfs] == [S.REMOVED, S.DELETED]
