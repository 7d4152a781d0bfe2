"""The PCI device state machine, row by row, and the PF/VF effects."""

import pytest

from pcisim import exception
from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.pci_device import PciDevice
from pcisim.objects.pci_device_state import TRANSITIONS

ALL_STATUSES = S.ALL
INSTANCE, OTHER = "instance-1", "instance-2"


def _device(address="0000:0a:00.0", dev_type="type-PCI", status=S.AVAILABLE, owner=None):
    return PciDevice(
        compute_node_id=1,
        address=address,
        vendor_id="8086",
        product_id="1521",
        dev_type=dev_type,
        status=status,
        label="l",
        instance_uuid=owner,
        request_id=None,
    )


def _pf_with_vfs(count=2, pf_status=S.AVAILABLE, vf_status=S.AVAILABLE):
    pf = _device("0000:0a:00.0", "type-PF", pf_status)
    vfs = [_device(f"0000:0a:10.{i}", "type-VF", vf_status) for i in range(count)]
    for vf in vfs:
        vf.link_parent(pf)
    return pf, vfs


def _fire(device, event, owner=INSTANCE):
    if event in ("claim", "allocate"):
        return device.claim(owner) if event == "claim" else device.allocate(owner)
    return device.free(owner) if event == "free" else device.remove()


LEGAL = [(event, status) for event, t in TRANSITIONS.items() for status in sorted(t.sources)]
ILLEGAL = [
    (event, status)
    for event, t in TRANSITIONS.items()
    for status in ALL_STATUSES
    if status not in t.sources
]


@pytest.mark.parametrize(("event", "status"), LEGAL)
def test_legal_transition_reaches_its_target(event, status):
    device = _device(status=status, owner=INSTANCE if status in (S.CLAIMED, S.ALLOCATED) else None)
    changed = _fire(device, event)
    assert device.status == TRANSITIONS[event].target
    assert changed == [device]


@pytest.mark.parametrize(("event", "status"), ILLEGAL)
def test_illegal_transition_is_refused_and_changes_nothing(event, status):
    device = _device(status=status, owner=INSTANCE)
    with pytest.raises(exception.PciDeviceInvalidStatus) as raised:
        _fire(device, event)
    assert (device.status, device.instance_uuid) == (status, INSTANCE)
    assert raised.value.kwargs["status"] == status
    assert device.address in str(raised.value)


def test_claim_and_allocate_record_the_owner_and_request():
    device = _device()
    device.claim(INSTANCE, request_id="r-1")
    assert (device.instance_uuid, device.request_id) == (INSTANCE, "r-1")
    device.allocate(INSTANCE, request_id="r-1")
    assert (device.status, device.instance_uuid) == (S.ALLOCATED, INSTANCE)


def test_free_clears_the_owner_and_request():
    device = _device()
    device.allocate(INSTANCE, request_id="r-1")
    device.free(INSTANCE)
    assert (device.status, device.instance_uuid, device.request_id) == (S.AVAILABLE, None, None)


def test_allocating_a_device_claimed_by_another_instance_is_refused():
    device = _device()
    device.claim(OTHER)
    with pytest.raises(exception.PciDeviceInvalidOwner, match=OTHER):
        device.allocate(INSTANCE)
    assert (device.status, device.instance_uuid) == (S.CLAIMED, OTHER)


def test_freeing_a_device_held_by_another_instance_is_refused():
    device = _device()
    device.allocate(OTHER)
    with pytest.raises(exception.PciDeviceInvalidOwner):
        device.free(INSTANCE)
    assert device.status == S.ALLOCATED


def test_freeing_without_naming_the_owner_frees_whoever_holds_it():
    device = _device()
    device.allocate(OTHER)
    device.free()
    assert device.status == S.AVAILABLE


def test_claiming_a_pf_makes_its_vfs_unclaimable():
    pf, vfs = _pf_with_vfs()
    changed = pf.claim(INSTANCE)
    assert [vf.status for vf in vfs] == [S.UNCLAIMABLE] * 2
    assert set(changed) == {pf, *vfs}


def test_allocating_a_pf_makes_its_vfs_unavailable():
    pf, vfs = _pf_with_vfs()
    pf.claim(INSTANCE)
    pf.allocate(INSTANCE)
    assert [vf.status for vf in vfs] == [S.UNAVAILABLE] * 2


def test_freeing_a_pf_makes_its_vfs_available_again():
    pf, vfs = _pf_with_vfs()
    pf.allocate(INSTANCE)
    pf.free(INSTANCE)
    assert [vf.status for vf in vfs] == [S.AVAILABLE] * 2


def test_a_pf_with_a_busy_vf_cannot_be_claimed():
    pf, vfs = _pf_with_vfs()
    vfs[0].claim(OTHER)
    with pytest.raises(exception.PciDeviceInvalidStatus):
        pf.claim(INSTANCE)


@pytest.mark.parametrize("vf_status", [S.CLAIMED, S.ALLOCATED])
def test_a_pf_whose_vf_is_busy_behind_its_back_refuses_with_the_vf_named(vf_status):
    pf, vfs = _pf_with_vfs()
    vfs[1].status = vf_status
    with pytest.raises(exception.PciDeviceVFInvalidStatus, match=vfs[1].address):
        pf.allocate(INSTANCE)
    assert pf.status == S.AVAILABLE and vfs[0].status == S.AVAILABLE


def test_removed_vfs_do_not_block_their_pf():
    pf, vfs = _pf_with_vfs()
    vfs[0].remove()
    pf.claim(INSTANCE)
    assert (vfs[0].status, vfs[1].status) == (S.REMOVED, S.UNCLAIMABLE)


def test_claiming_a_vf_makes_its_pf_unclaimable():
    pf, vfs = _pf_with_vfs()
    changed = vfs[0].claim(INSTANCE)
    assert pf.status == S.UNCLAIMABLE
    assert changed == [vfs[0], pf]


def test_allocating_a_vf_makes_its_pf_unavailable():
    pf, vfs = _pf_with_vfs()
    vfs[0].allocate(INSTANCE)
    assert pf.status == S.UNAVAILABLE


def test_claiming_a_second_vf_keeps_the_pf_unavailable_while_one_is_allocated():
    pf, vfs = _pf_with_vfs()
    vfs[0].allocate(INSTANCE)
    vfs[1].claim(OTHER)
    assert pf.status == S.UNAVAILABLE


def test_freeing_one_of_two_busy_vfs_keeps_the_pf_busy():
    pf, vfs = _pf_with_vfs()
    vfs[0].allocate(INSTANCE)
    vfs[1].claim(OTHER)
    vfs[0].free(INSTANCE)
    assert pf.status == S.UNCLAIMABLE


def test_freeing_the_last_busy_vf_makes_the_pf_available():
    pf, vfs = _pf_with_vfs()
    vfs[0].allocate(INSTANCE)
    vfs[1].allocate(OTHER)
    vfs[0].free()
    vfs[1].free()
    assert pf.status == S.AVAILABLE


@pytest.mark.parametrize("pf_status", [S.CLAIMED, S.ALLOCATED, S.REMOVED, S.DELETED])
def test_a_vf_of_a_pf_in_use_or_gone_cannot_be_claimed(pf_status):
    pf, vfs = _pf_with_vfs(pf_status=pf_status)
    with pytest.raises(exception.PciDevicePFInvalidStatus, match=pf.address):
        vfs[0].claim(INSTANCE)
    assert (vfs[0].status, pf.status) == (S.AVAILABLE, pf_status)


def test_a_vf_without_a_tracked_pf_is_claimed_alone():
    vf = _device("0000:0a:10.0", "type-VF")
    assert vf.claim(INSTANCE) == [vf]


@pytest.mark.parametrize("status", [S.AVAILABLE, S.UNCLAIMABLE, S.UNAVAILABLE])
def test_a_device_without_owner_is_removed_in_any_status_nova_removes(status):
    device = _device(status=status)
    assert device.remove() == [device]
    assert (device.status, device.instance_uuid) == (S.REMOVED, None)


def test_removing_a_device_that_has_an_owner_is_refused_whatever_its_status():
    device = _device(status=S.UNAVAILABLE, owner=OTHER)
    with pytest.raises(exception.PciDeviceInvalidOwner, match=OTHER):
        device.remove()
    assert (device.status, device.instance_uuid) == (S.UNAVAILABLE, OTHER)


def test_removing_the_idle_pf_of_an_allocated_vf_leaves_the_vf_allocated():
    pf, vfs = _pf_with_vfs()
    vfs[0].allocate(INSTANCE)
    assert pf.remove() == [pf]
    vfs[0].free(INSTANCE)
    assert (pf.status, vfs[0].status) == (S.REMOVED, S.AVAILABLE)


@pytest.mark.parametrize("vf_status", [S.UNCLAIMABLE, S.UNAVAILABLE])
def test_claiming_an_available_pf_tolerates_idle_busy_looking_vfs_as_nova_bug_1969496_needs(
    vf_status, caplog
):
    pf, vfs = _pf_with_vfs(vf_status=vf_status)
    pf.claim(INSTANCE)
    assert "Nova bug 1969496" in caplog.text
    assert [vf.status for vf in vfs] == [S.UNCLAIMABLE] * 2
    pf.free(INSTANCE)
    assert [vf.status for vf in vfs] == [S.AVAILABLE] * 2


def test_a_vf_with_an_owner_still_keeps_its_pf_from_being_claimed():
    pf, vfs = _pf_with_vfs(vf_status=S.UNAVAILABLE)
    vfs[0].instance_uuid = OTHER
    with pytest.raises(exception.PciDeviceVFInvalidStatus, match=vfs[0].address):
        pf.claim(INSTANCE)
    assert pf.status == S.AVAILABLE
