"""The PCI device state machine: one table, applied by ``PciDevice``'s local methods.

Each event moves a device from one of its legal source statuses to a target status,
and has an effect on the device's relatives:

========  ======================  ==========  ==========================  ================
event     from                    to          a PF's live VFs             a VF's PF
========  ======================  ==========  ==========================  ================
claim     available               claimed     must be available;          must be free of
                                              become unclaimable          its own claims
allocate  available, claimed      allocated   must be available or        idem
                                              unclaimable; become
                                              unavailable
free      claimed, allocated      available   become available            follows its VFs
remove    available, unclaimable, removed     (none)                      follows its VFs
          unavailable; no owner
========  ======================  ==========  ==========================  ================

A PF "follows its VFs": unavailable while any VF is allocated, unclaimable while any VF
is claimed, available otherwise. Nova sets the PF to unclaimable on every VF claim,
even when another VF is allocated; deriving it from the VFs keeps the PF's status true.
This is the state machine's one difference from Nova (``docs/inventory.md`` lists all).

Every check runs before anything changes, so a refused event changes nothing.

Claiming an available PF tolerates VFs that are unclaimable or unavailable without an
owner, with a warning, as Nova does since its bug 1969496: older code left such rows
behind, and refusing the PF while it stays pooled would fail every claim the
scheduler sends to the node. The claim makes those VFs unclaimable, so freeing the PF
makes them available again and the inconsistency is gone.
"""

import dataclasses

from oslo_log import log as logging

from pcisim import exception
from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.fields import PciDeviceType

LOG = logging.getLogger(__name__)
_GONE = frozenset({S.REMOVED, S.DELETED})
PF_FOLLOWING_VFS = frozenset({S.AVAILABLE, S.UNCLAIMABLE, S.UNAVAILABLE})


@dataclasses.dataclass(frozen=True)
class Transition:
    sources: frozenset
    target: str
    vfs_must_be: frozenset | None  # for a PF: every live VF must be in one of these
    vfs_become: str | None  # ... and then becomes this
    holds: bool  # whether the device ends up held by an instance
    vfs_tolerated: frozenset = frozenset()  # VF statuses let pass, with a warning


TRANSITIONS = {
    "claim": Transition(
        frozenset({S.AVAILABLE}),
        S.CLAIMED,
        frozenset({S.AVAILABLE}),
        S.UNCLAIMABLE,
        True,
        vfs_tolerated=frozenset({S.UNCLAIMABLE, S.UNAVAILABLE}),  # NOTE: Nova bug 1969496
    ),
    "allocate": Transition(
        frozenset({S.AVAILABLE, S.CLAIMED}),
        S.ALLOCATED,
        frozenset({S.AVAILABLE, S.UNCLAIMABLE}),
        S.UNAVAILABLE,
        True,
    ),
    "free": Transition(frozenset({S.CLAIMED, S.ALLOCATED}), S.AVAILABLE, None, S.AVAILABLE, False),
    # NOTE: as in Nova, any device without an owner may go: the idle VF of an
    # allocated PF, or the idle PF of an allocated VF, leaves with the hypervisor.
    "remove": Transition(
        frozenset({S.AVAILABLE, S.UNCLAIMABLE, S.UNAVAILABLE}), S.REMOVED, None, None, False
    ),
}


def live_vfs(device):
    return [vf for vf in device.child_devices if vf.status not in _GONE]


def pf_status_for(vfs):
    """The status a PF takes from its VFs."""
    statuses = {vf.status for vf in vfs}
    if S.ALLOCATED in statuses:
        return S.UNAVAILABLE
    if S.CLAIMED in statuses:
        return S.UNCLAIMABLE
    return S.AVAILABLE


def vfs_joining(pf):
    """Give the available live VFs of a claimed or allocated PF the status that its
    claim or allocation gave its other VFs; return them.

    For a VF the tracker learns of while its PF is held (hot-plugged, or reported
    again): without it the VF would be pooled free under a PF passed to a guest.
    """
    busy = {S.CLAIMED: S.UNCLAIMABLE, S.ALLOCATED: S.UNAVAILABLE}.get(pf.status)
    if busy is None:
        return []
    return _set_status([vf for vf in live_vfs(pf) if vf.status == S.AVAILABLE], busy)


def apply(device, event, instance_uuid=None, request_id=None):
    """Apply ``event`` to ``device``; return every device whose status changed."""
    transition = TRANSITIONS[event]
    _check(device, event, transition, instance_uuid)
    changed = [device]
    device.status = transition.target
    device.instance_uuid = instance_uuid if transition.holds else None
    device.request_id = request_id if transition.holds else None
    if device.dev_type == PciDeviceType.SRIOV_PF and transition.vfs_become:
        changed += _set_status(live_vfs(device), transition.vfs_become)
    parent = device.parent_device
    if parent is not None and parent.status in PF_FOLLOWING_VFS:
        changed += _set_status([parent], pf_status_for(live_vfs(parent)))
    return changed


def _set_status(devices, status):
    changed = [device for device in devices if device.status != status]
    for device in changed:
        device.status = status
    return changed


def _check(device, event, transition, instance_uuid):
    if device.status not in transition.sources:
        raise exception.PciDeviceInvalidStatus(
            compute_node_id=device.compute_node_id,
            address=device.address,
            status=device.status,
            hopestatus=", ".join(sorted(transition.sources)),
        )
    _check_owner(device, event, instance_uuid)
    if device.dev_type == PciDeviceType.SRIOV_PF and transition.vfs_must_be:
        _check_vfs(device, transition)
    if transition.holds and device.parent_device is not None:
        _check_pf(device)


def _check_owner(device, event, instance_uuid):
    owner = device.instance_uuid
    claimed_by_another = event == "allocate" and device.status == S.CLAIMED
    freed_by_another = event == "free" and instance_uuid is not None
    removed_from_its_owner = event == "remove"  # NOTE: instance_uuid is None
    if (claimed_by_another or freed_by_another or removed_from_its_owner) and (
        owner != instance_uuid
    ):
        raise exception.PciDeviceInvalidOwner(
            compute_node_id=device.compute_node_id,
            address=device.address,
            owner=owner,
            hopeowner=instance_uuid,
        )


def _check_vfs(device, transition):
    allowed = transition.vfs_must_be
    others = [vf for vf in live_vfs(device) if vf.status not in allowed]
    tolerated = [vf for vf in others if _tolerated(vf, transition)]
    busy = [f"{vf.address} ({vf.status})" for vf in others if not _tolerated(vf, transition)]
    if busy:
        raise exception.PciDeviceVFInvalidStatus(
            compute_node_id=device.compute_node_id,
            address=device.address,
            hopestatus=" or ".join(sorted(allowed)),
            busy=", ".join(busy),
        )
    if tolerated:
        LOG.warning(
            "PF %s:%s is available while VFs of it are not, a state older code left "
            "(Nova bug 1969496); claiming it anyway, which sets them right: %s",
            device.compute_node_id,
            device.address,
            ", ".join(f"{vf.address} ({vf.status})" for vf in tolerated),
        )


def _tolerated(vf, transition):
    return vf.status in transition.vfs_tolerated and vf.instance_uuid is None


def _check_pf(device):
    parent = device.parent_device
    if parent.status not in PF_FOLLOWING_VFS:
        raise exception.PciDevicePFInvalidStatus(
            compute_node_id=device.compute_node_id,
            address=parent.address,
            vf_address=device.address,
            status=parent.status,
            hopestatus=", ".join(sorted(PF_FOLLOWING_VFS)),
        )
