"""pcisim-manage pci audit: PCI records the tracker's invariants forbid, per node, and
with ``--heal`` the ones that can be mended without guessing, each in a transaction
guarded as the tracker's own writes are, so that it can run beside live computes.

Findings (checks in ``pci/audit.py``, queries in ``db/pci_audit.py``) and their heals:

- ``held``: a device claimed or allocated for an instance without a live row (deleted,
  archived), or for a live instance on another node. Healed, for a gone instance: the
  node's PCI tracker is loaded from the database, frees the instance's devices (its PF
  or VFs follow, as in any free) and saves them with its compare-and-swap, with the
  node's pools and the end of the instance's allocation there, as the compute's free
  does; a compute that changed them meanwhile wins and the node is left for a next
  run. A device held for no instance, or for a live instance elsewhere, is left:
  nothing says whose it was, or its instance may still need it.
- ``missing identity``: a row without its node, address, vendor, product or type (Nova
  bug 1899541's residue). Healed (soft-deleted) when no live node can report it (it
  has no live node, or no address) and no live instance holds it; otherwise left: only
  its node's hypervisor report can tell what it was.
- ``unexplained``: a device a live instance holds on its node that the instance's PCI
  requests do not explain. Left: the guest may be using it.
- ``family``: PF and VF statuses the state table (``objects.pci_device_state``) forbids
  together (including Nova bug 1969496's available PF with unavailable VFs). Left: a
  compute's tracker settles a PF's status when it loads its devices; the rest needs
  the operator.
- ``allocation``: an allocation whose consumer is not a live, non-ERROR instance on its
  node. Healed (removed) when the consumer holds no device there; otherwise the free
  of its devices ends it.
- ``uncovered``: a live instance's allocation covering fewer devices of a pool than it
  holds on the node. Left: its compute heals allocations from what it holds.
- ``pools``: pools published on a node (free and inventory) that count other numbers
  of devices than its rows. Healed: recomputed from the rows, with the device_spec tags
  the node's inventory published, written only if the node's pools are still as read;
  left when the published pools do not say a device's tags. Nodes with rows missing
  identity (but deleted ones) are not compared.

``--dry-run`` runs the heal's checks, in its transactions, and writes nothing.
"""

import collections
import json

from oslo_db import exception as db_exc
from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import exception, faults
from pcisim.db import allocations as db_allocations
from pcisim.db import engine as db_engine
from pcisim.db import pci_audit
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import audit as checks
from pcisim.pci import manager as pci_manager

LOG = logging.getLogger(__name__)
EXIT_NOTHING_FOUND = 0
EXIT_FOUND = 1
TEXT, JSON = "text", "json"
FORMATS = (TEXT, JSON)
POOL_COLUMNS = ("pci_stats", "pci_inventory")


class Run:
    """One audit: what it was asked to do, and the outcomes it gives findings."""

    def __init__(self, context, host=None, heal=False, dry_run=False):
        self.context, self.host = context, host
        self.heals = heal or dry_run
        self.dry_run = dry_run

    def outcome(self, done):
        """The outcome of a finding healed by ``done`` ("freed", ...)."""
        return f"would be {done}" if self.dry_run else done


def audit(host=None, heal=False, dry_run=False, verbose=False, output=TEXT):
    """Print the findings node by node, healing what can be healed (``dry_run``: saying
    what a heal would do); the exit code."""
    run = Run(pcisim_context.get_admin_context(), host, heal, dry_run)
    context = run.context
    gone = [
        checks.device_finding("held", row, _held_by_gone(row))
        for row in pci_audit.devices_held_by_missing_instances(context, host)
    ]
    blank = [
        checks.device_finding("missing identity", row, _missing(row))
        for row in pci_audit.blank_devices(context, host)
    ]
    live = pci_audit.devices_held_by_live_instances(context, host)
    orphans = [_orphan_finding(row) for row in pci_audit.orphaned_allocations(context, host)]
    uncovered = []
    if pcisim_conf.CONF.scheduler.claim_mode == "allocations":
        uncovered = checks.uncovered(live, pci_audit.allocations_on_live_nodes(context, host))
    pools = _pool_findings(run, {finding.node[0] for finding in blank})
    if run.heals:
        changed = _heal_gone(run, gone, orphans)
        _heal_orphans(run, orphans)
        changed |= _heal_blank(run, blank)
        _heal_pools(run, pools, changed)
    family = checks.family_findings(pci_audit.sriov_devices(context, host))
    findings = gone + checks.held_elsewhere(live) + blank + checks.unexplained(live)
    findings += family + orphans + uncovered + pools
    nodes = pci_audit.live_nodes(context, host) if verbose else []
    report = _json_report if output == JSON else _text_report
    print(report(run, findings, nodes, verbose))
    return EXIT_FOUND if findings else EXIT_NOTHING_FOUND


def _held_by_gone(row):
    if row.instance_uuid is None:
        return f"{row.status} for no instance"
    return f"{row.status} by {row.instance_uuid}, which has no live instance row"


def _missing(row):
    missing = [name for name in pci_audit.IDENTITY if not getattr(row, name)]
    return f"missing {', '.join(missing)}"


def _orphan_finding(row):
    return checks.Finding(
        "allocation",
        checks.node_of(row),
        f"allocation of {row.consumer_uuid}",
        ", which no live instance on this node holds",
        instance_uuid=row.consumer_uuid,
    )


# -------------------------------------------------------------------- heals


def _heal_gone(run, gone, orphans):
    """Free, node by node, the devices of gone instances through the node's tracker;
    their allocations there end with them. Returns the ids of the nodes healed."""
    by_node = collections.defaultdict(list)
    for finding in gone:
        if finding.instance_uuid is not None:
            by_node[finding.node[0]].append(finding)
    healed = set()
    for node_id, found in by_node.items():
        holders = {finding.instance_uuid for finding in found}
        try:
            freed, released = _free_on_node(run, node_id, holders)
        except (exception.Conflict, db_exc.DBDeadlock) as error:
            LOG.warning("Node %s: not healed (%s); run the audit again", node_id, error)
            continue
        healed.add(node_id)
        for finding in found:
            if finding.device.address in freed:
                finding.outcome = run.outcome("freed")
        for finding in orphans:
            if finding.node[0] == node_id and finding.instance_uuid in released:
                finding.outcome = run.outcome("released")
    return healed


def _free_on_node(run, node_id, gone):
    """Free what ``gone`` instances hold on the node, ending their allocations there:
    the addresses of the devices freed, and the instances whose allocations ended.

    Guarded as a whole: it refuses (``PciHealRefused``) to change a device held by an
    instance that is not gone (a PF's free makes its VFs available), and saves only
    if none of the node's devices changed since they were read (``PciDeviceConflict``):
    the derived statuses it writes (a PF's, from its VFs) rest on all of them."""
    read = pci_audit.device_holders(run.context, node_id)
    node = ComputeNode.get_by_id(run.context, node_id)
    tags = checks.PublishedTags(node.pci_inventory)
    tracker = _tracker(run.context, node, tags, node.pci_inventory)
    freeing, freed = sorted(gone & tracker.holders()), []
    for instance_uuid in freeing:
        freed += tracker.free_instance(instance_uuid)
    _refuse_changes_to_the_living(node_id, tracker, read, set(freeing))
    if not tags.unknown:
        node.pci_device_pools = tracker.stats.to_device_pools_obj()
        node.pci_inventory = tracker.inventory()
    faults.point(faults.BEFORE_AUDIT_HEAL_SAVE, node_id=node_id, heal="devices")
    if not run.dry_run:
        with db_engine.write_transaction(run.context):
            _refuse_if_changed(run.context, node_id, read)
            # NOTE: as in the compute's own free, their allocations here end with the free.
            tracker.save(run.context, node, released=freeing)
    return {device.address for device in freed}, set(freeing)


def _refuse_changes_to_the_living(node_id, tracker, read, gone):
    touched = sorted(
        device.address
        for device in tracker.devices
        if read[device.address][1] not in gone | {None}
        and (device.status, device.instance_uuid) != read[device.address]
    )
    if touched:
        reason = f"freeing would change {', '.join(touched)}, which live instances hold"
        raise exception.PciHealRefused(node_id=node_id, reason=reason)


def _refuse_if_changed(context, node_id, read):
    now = pci_audit.lock_device_holders(context, node_id)
    changed = sorted(
        address for address in read.keys() | now.keys() if read.get(address) != now.get(address)
    )
    if changed:
        details = f"{', '.join(changed)} changed since the heal read them"
        raise exception.PciDeviceConflict(node_id=node_id, addresses=changed, details=details)


def _tracker(context, node, tags, inventory):
    """The node's PCI tracker, loaded from its rows, with device_spec ``tags`` and the
    NUMA layout its ``inventory`` published."""
    sockets = inventory.socket_map() if inventory is not None else None
    return pci_manager.PciDevTracker(context, node, tags, numa_sockets=sockets or None)


def _heal_orphans(run, orphans):
    for finding in orphans:
        if finding.outcome != checks.LEFT:
            continue
        node_id, consumer_uuid = finding.node[0], finding.instance_uuid
        faults.point(
            faults.BEFORE_AUDIT_HEAL_SAVE,
            node_id=node_id,
            heal="allocation",
            consumer_uuid=consumer_uuid,
        )
        if db_allocations.release_orphan(run.context, node_id, consumer_uuid, run.dry_run):
            finding.outcome = run.outcome("released")


def _heal_blank(run, blank):
    """Delete the blank rows no live node can report; the ids of their nodes."""
    nodes = set()
    for finding in blank:
        device_id = finding.device.id
        faults.point(
            faults.BEFORE_AUDIT_HEAL_SAVE,
            node_id=finding.node[0],
            heal="blank row",
            device_id=device_id,
        )
        if pci_audit.delete_unreportable_blank_device(run.context, device_id, run.dry_run):
            finding.outcome = run.outcome("deleted")
            nodes.add(finding.node[0])
    return nodes


def _pool_findings(run, skipped):
    """The pools findings of the live nodes but ``skipped`` ones."""
    found = []
    for row in pci_audit.live_nodes(run.context, run.host):
        if row.id not in skipped:
            found += _compare_pools(run, row)[0]
    return found


def _compare_pools(run, row):
    """The findings of the node's published pools against its rows, and the pools the
    rows make (None when the published pools do not say a device's tags)."""
    published = {
        column: PciDevicePoolList.from_json(text) if text else None
        for column, text in _texts(row).items()
    }
    tags = checks.PublishedTags(published["pci_inventory"])
    tracker = _tracker(run.context, row, tags, published["pci_inventory"])
    rows_say = {
        "pci_stats": tracker.stats.to_device_pools_obj(),
        "pci_inventory": tracker.inventory(),
    }
    found = checks.pool_findings(_node(row), published, rows_say)
    return found, None if tags.unknown else rows_say


def _heal_pools(run, found, changed):
    """Recompute the pools of the nodes of ``found`` pools findings, and of the
    ``changed`` nodes, whose rows a heal changed (a free saves pools with it, unless
    their tags are unknown); a finding is healed once its node's pools agree with its
    rows."""
    by_node = collections.defaultdict(list)
    for finding in found:
        by_node[finding.node[0]].append(finding)
    for row in pci_audit.live_nodes(run.context, run.host):
        if (row.id in by_node or row.id in changed) and _recompute_pools(run, row):
            for finding in by_node[row.id]:
                finding.outcome = run.outcome("recomputed")


def _recompute_pools(run, row):
    """Whether the node's pools agree with its rows, once written from them (``dry_run``:
    would) if they were still as read."""
    found, rows_say = _compare_pools(run, row)
    if not found:
        return True
    if rows_say is None:
        return False
    pools = {column: pools.to_json() for column, pools in rows_say.items()}
    faults.point(faults.BEFORE_AUDIT_HEAL_SAVE, node_id=row.id, heal="pools")
    return pci_audit.swap_node_pools(run.context, row.id, _texts(row), pools, run.dry_run)


def _texts(row):
    return {column: getattr(row, column) for column in POOL_COLUMNS}


def _node(row):
    return (row.id, row.host, row.hypervisor_hostname)


# ------------------------------------------------------------------ reports


def _by_node(findings):
    by_node = {}
    for finding in findings:
        by_node.setdefault(finding.node, []).append(finding)
    return by_node


def _healed(findings):
    return sum(finding.outcome != checks.LEFT for finding in findings)


def _text_report(run, findings, nodes, verbose):
    by_node = _by_node(findings)
    lines = []
    for node, found in by_node.items():
        lines.append(f"{_node_name(node)}: {_count(len(found), 'finding')}")
        for finding in found:
            lines.append(finding.line())
            if verbose and finding.device is not None:
                lines.append(_device_details(finding.device))
    if verbose:
        lines += [f"{_node_name(_node(n))}: no findings" for n in nodes if _node(n) not in by_node]
    healed = _healed(findings)
    done = "would be healed" if run.dry_run else "healed"
    lines.append(
        f"{_count(len(findings), 'finding')} on {_count(len(by_node), 'node')}; "
        f"{healed} {done}, {len(findings) - healed} left."
    )
    return "\n".join(lines)


def _node_name(node):
    node_id, host, name = node
    return "no node" if node_id is None else f"node {node_id} ({host}/{name})"


def _count(number, noun):
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _device_details(row):
    return (
        f"    row {row.id}: {row.vendor_id or '?'}:{row.product_id or '?'} "
        f"{row.dev_type or '?'}, status {row.status}, instance {row.instance_uuid}"
    )


def _json_report(run, findings, nodes, verbose):
    by_node = _by_node(findings)
    if verbose:
        for row in nodes:
            by_node.setdefault(_node(row), [])
    healed = _healed(findings)
    document = {
        "dry_run": run.dry_run,
        "nodes": [
            {
                "id": node_id,
                "host": host,
                "hypervisor_hostname": name,
                "findings": [finding.as_dict() for finding in found],
            }
            for (node_id, host, name), found in by_node.items()
        ],
        "findings": len(findings),
        "healed": healed,
        "left": len(findings) - healed,
    }
    return json.dumps(document, indent=2)
