"""pcisim-manage pci audit: PCI device records the tracker's invariants forbid, per
node, and with ``--heal`` the ones that can be mended without guessing.

Findings (queries in ``db/pci_audit.py``):

- ``held by a gone instance``: a device claimed or allocated for an instance without
  a live row (deleted, archived). Healed: the node's PCI tracker is loaded from the
  database, frees the instance's devices (its PF or VFs follow, as in any free) and
  saves them with its compare-and-swap, ending the instance's allocation on the node
  in the same transaction as the compute's free does; a compute that changed them
  meanwhile wins and the heal of that node is left for a next run. A device held for no instance at
  all is left: nothing says whose it was.
- ``missing identity``: a row without its node, address, vendor, product or type (Nova
  bug 1899541's residue). Left: only the node's hypervisor report could tell what it
  was.
- ``family``: PF and VF statuses the state table (``objects.pci_device_state``) forbids
  together: a VF not as its claimed or allocated PF made it, a PF whose status is not
  the one its VFs give it, a VF unclaimable or unavailable under a free PF (Nova bug
  1969496). Left: a compute's tracker settles a PF's status when it loads its devices;
  the rest needs the operator.
- ``allocation``: an allocation whose consumer is not a live, non-ERROR instance on its
  node (``db.allocations.orphaned``). Left: the node's compute removes it at its next
  periodic run (``allocations.heal``), knowing what it holds.
"""

from oslo_log import log as logging

from pcisim import context as pcisim_context
from pcisim import exception, faults
from pcisim.db import pci_audit
from pcisim.objects import fields
from pcisim.objects import pci_device_state as state
from pcisim.objects.compute_node import ComputeNode
from pcisim.pci import devspec
from pcisim.pci import manager as pci_manager

LOG = logging.getLogger(__name__)
EXIT_NOTHING_FOUND = 0
EXIT_FOUND = 1
S = fields.PciDeviceStatus
# What a claimed or allocated PF makes of its VFs, as the state table's transitions say.
IMPOSED_ON_VFS = {
    state.TRANSITIONS[event].target: state.TRANSITIONS[event].vfs_become
    for event in ("claim", "allocate")
}
GONE = frozenset({S.REMOVED, S.DELETED})


class Finding:
    """One device row found; ``outcome`` says what the run did of it."""

    def __init__(self, row, kind, why=None):
        self.row = row
        self.kind = kind
        self.why = why  # for a ``family`` finding
        self.outcome = "left"

    @property
    def node(self):
        row = self.row
        if row.compute_node_id is None:
            return "no node"
        return f"node {row.compute_node_id} ({row.host}/{row.hypervisor_hostname})"

    def line(self):
        row = self.row
        if self.kind == "allocation":
            later = " (its compute removes it at its next periodic run)"
            return (
                f"  allocation of {row.consumer_uuid}, which no live instance on this node "
                f"holds: {self.outcome}{later if self.outcome == 'left' else ''}"
            )
        if self.kind == "family":
            what = self.why
        elif self.kind == "missing identity":
            missing = [name for name in pci_audit.IDENTITY if not getattr(row, name)]
            what = f"missing {', '.join(missing)}"
        elif row.instance_uuid is None:
            what = f"{row.status} for no instance"
        else:
            what = f"{row.status} by {row.instance_uuid}, which has no live instance row"
        return f"  {row.address or '(no address)'} {what}: {self.outcome}"


def audit(host=None, heal=False):
    """Print the findings node by node, healing what can be; the exit code."""
    context = pcisim_context.get_admin_context()
    held = [Finding(r, "held") for r in pci_audit.devices_held_by_missing_instances(context, host)]
    blank = [Finding(r, "missing identity") for r in pci_audit.blank_devices(context, host)]
    orphans = [Finding(r, "allocation") for r in pci_audit.orphaned_allocations(context, host)]
    if heal:
        _heal(context, held, orphans)
    family = _family_findings(pci_audit.sriov_devices(context, host))
    findings = held + blank + family + orphans
    by_node = {}
    for finding in findings:
        by_node.setdefault(finding.node, []).append(finding)
    for node, found in by_node.items():
        print(f"{node}: {len(found)} finding{'s' if len(found) > 1 else ''}")
        for finding in found:
            print(finding.line())
    healed = sum(finding.outcome != "left" for finding in findings)
    print(
        f"{len(findings)} finding{'' if len(findings) == 1 else 's'} on {len(by_node)} "
        f"node{'' if len(by_node) == 1 else 's'}; {healed} healed, {len(findings) - healed} left."
    )
    return EXIT_FOUND if findings else EXIT_NOTHING_FOUND


def _family_findings(rows):
    """PF and VF rows whose statuses the state table forbids together."""
    pfs = {(r.compute_node_id, r.address): r for r in rows if r.dev_type == "type-PF"}
    vfs = {}
    for row in rows:
        if row.dev_type == "type-VF" and (row.compute_node_id, row.parent_addr) in pfs:
            vfs.setdefault((row.compute_node_id, row.parent_addr), []).append(row)
    found = []
    for key, pf in pfs.items():
        live = [vf for vf in vfs.get(key, ()) if vf.status not in GONE]
        found += _family_of(pf, live)
    return found


def _family_of(pf, vfs):
    """A held PF's VFs must be as it made them; a free PF's VFs must not be, and its
    status must be the one they give it."""
    imposed = IMPOSED_ON_VFS.get(pf.status)
    if imposed is not None:
        why = f"under the {pf.status} PF {pf.address}, which makes its VFs {imposed}"
        return [Finding(vf, "family", f"{vf.status} {why}") for vf in vfs if vf.status != imposed]
    if pf.status not in state.PF_FOLLOWING_VFS:
        return []
    bug = " (Nova bug 1969496)" if pf.status == S.AVAILABLE else ""
    found = [
        Finding(vf, "family", f"{vf.status} under the {pf.status} PF {pf.address}{bug}")
        for vf in vfs
        if vf.status in IMPOSED_ON_VFS.values()
    ]
    implied = state.pf_status_for(vfs)
    if pf.status != implied:
        found.append(Finding(pf, "family", f"PF {pf.status}, which its VFs make {implied}"))
    return found


def _heal(context, held, orphans):
    """Free, node by node, the devices of gone instances through the node's tracker;
    their allocations there are released with them."""
    by_node = {}
    for finding in held:
        if finding.row.instance_uuid is not None:
            by_node.setdefault(finding.row.compute_node_id, []).append(finding)
    for node_id, found in by_node.items():
        try:
            freed, released = _free_on_node(context, node_id, {f.row.instance_uuid for f in found})
        except exception.PciDeviceConflict:
            LOG.warning("Node %s: its devices changed while healing; run the audit again", node_id)
            continue
        for finding in found:
            if finding.row.address in freed:
                finding.outcome = "freed"
        for finding in orphans:
            if finding.row.compute_node_id == node_id and finding.row.consumer_uuid in released:
                finding.outcome = "released"


def _free_on_node(context, node_id, gone):
    """Free what ``gone`` instances hold on the node, ending their allocations there:
    the addresses of the devices freed, and the instances whose allocations ended."""
    node = ComputeNode.get_by_id(context, node_id)
    # NOTE: tags (from the device_spec) only shape the tracker's pools, which the
    # node's compute publishes; the free and its compare-and-swap need none.
    tracker = pci_manager.PciDevTracker(context, node, devspec.DeviceSpecList.from_config([]))
    freeing, freed = sorted(gone & tracker.holders()), []
    for instance_uuid in freeing:
        freed += tracker.free_instance(instance_uuid)
    faults.point(faults.BEFORE_AUDIT_HEAL_SAVE, node_id=node_id)
    # NOTE: as in the compute's own free, their allocations here end with the free.
    tracker.save(context, node, released=freeing)
    return {device.address for device in freed}, set(freeing)
