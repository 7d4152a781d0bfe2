"""The PCI audit's checks: what the tracker's invariants forbid in one node's records,
found in rows already read (``db/pci_audit.py`` reads them), as ``Finding``s.

They change nothing; ``pcisim.cmd.pci_audit`` runs them, heals what can be healed and
prints the findings.
"""

import collections
import dataclasses
import json
import types

from pcisim.objects import fields
from pcisim.objects import pci_device_state as state
from pcisim.pci import capacity
from pcisim.pci.request import spec_matches

S = fields.PciDeviceStatus
LEFT = "left"
# What a claimed or allocated PF makes of its VFs, as the state table's transitions say.
IMPOSED_ON_VFS = {
    state.TRANSITIONS[event].target: state.TRANSITIONS[event].vfs_become
    for event in ("claim", "allocate")
}
GONE = frozenset({S.REMOVED, S.DELETED})
# The keys of a request spec a device row can answer; device_spec tags it cannot.
ROW_SPEC_KEYS = ("vendor_id", "product_id", "dev_type")


@dataclasses.dataclass
class Finding:
    """One thing found on a node: ``subject`` (a device's address, an allocation, a
    pool) ``problem`` (what is wrong with it); ``outcome`` says what the run did."""

    kind: str
    node: tuple  # (id, host, hypervisor_hostname); (None, None, None) for no node
    subject: str
    problem: str
    outcome: str = LEFT
    device: object = None  # the device row, for a finding about one
    instance_uuid: str | None = None

    def line(self):
        separator = "" if self.problem.startswith(",") else " "
        return f"  {self.subject}{separator}{self.problem}: {self.outcome}"

    def as_dict(self):
        device = self.device
        return {
            "kind": self.kind,
            "subject": self.subject,
            "problem": self.problem,
            "outcome": self.outcome,
            "device_id": None if device is None else device.id,
            "address": None if device is None else device.address,
            "instance_uuid": self.instance_uuid,
        }


def node_of(row):
    """The (id, host, hypervisor_hostname) of a row's node."""
    return (row.compute_node_id, row.host, row.hypervisor_hostname)


def device_finding(kind, row, problem):
    return Finding(
        kind,
        node_of(row),
        row.address or "(no address)",
        problem,
        device=row,
        instance_uuid=row.instance_uuid,
    )


# ------------------------------------------------------------------ families


def family_findings(rows):
    """PF and VF rows (of any nodes) whose statuses the state table forbids together."""
    pfs = {(r.compute_node_id, r.address): r for r in rows if r.dev_type == "type-PF"}
    vfs = collections.defaultdict(list)
    for row in rows:
        if row.dev_type == "type-VF" and (row.compute_node_id, row.parent_addr) in pfs:
            vfs[(row.compute_node_id, row.parent_addr)].append(row)
    found = []
    for key, pf in pfs.items():
        found += _family_of(pf, [vf for vf in vfs[key] if vf.status not in GONE])
    return found


def _family_of(pf, vfs):
    """A held PF's VFs must be as it made them; a free PF's VFs must not be, and its
    status must be the one they give it."""
    imposed = IMPOSED_ON_VFS.get(pf.status)
    if imposed is not None:
        why = f"under the {pf.status} PF {pf.address}, which makes its VFs {imposed}"
        return [
            device_finding("family", vf, f"{vf.status} {why}") for vf in vfs if vf.status != imposed
        ]
    if pf.status not in state.PF_FOLLOWING_VFS:
        return []
    bug = " (Nova bug 1969496)" if pf.status == S.AVAILABLE else ""
    found = [
        device_finding("family", vf, f"{vf.status} under the {pf.status} PF {pf.address}{bug}")
        for vf in vfs
        if vf.status in IMPOSED_ON_VFS.values()
    ]
    implied = state.pf_status_for(vfs)
    if pf.status != implied:
        found.append(device_finding("family", pf, f"PF {pf.status}, which its VFs make {implied}"))
    return found


# --------------------------------------------------------- live instances' devices


def held_elsewhere(rows):
    """Devices (rows of ``devices_held_by_live_instances``) held by a live instance
    that is on another node."""
    return [
        device_finding(
            "held",
            row,
            f"{row.status} by {row.instance_uuid}, which is on {row.holder_host}/{row.holder_node}",
        )
        for row in rows
        if not _on_its_node(row)
    ]


def _on_its_node(row):
    return (row.holder_host, row.holder_node) == (row.host, row.hypervisor_hostname)


def unexplained(rows):
    """Devices live instances hold on their own node that their PCI requests do not
    explain: no request of theirs carries the device's request id, the request's
    specs do not match the device, or the request asked for fewer devices."""
    by_request = collections.defaultdict(list)
    for row in filter(_on_its_node, rows):
        by_request[(row.instance_uuid, row.request_id)].append(row)
    found = []
    for (_, request_id), held in by_request.items():
        requests = {r.get("request_id"): r for r in json.loads(held[0].pci_requests or "[]")}
        found += _unexplained_by(requests.get(request_id), sorted(held, key=_address))
    return found


def _address(row):
    return row.address


def _unexplained_by(request, held):
    def finding(row, why):
        return device_finding("unexplained", row, f"{row.status} by {row.instance_uuid}, {why}")

    if request is None:
        return [finding(row, "which none of its PCI requests asked for") for row in held]
    name = request.get("alias_name") or "its request"
    matching = [row for row in held if any(_matches(spec, row) for spec in request["spec"])]
    found = [finding(row, f"which {name} does not match") for row in held if row not in matching]
    count = request["count"]
    return found + [
        finding(row, f"beyond the {count} device{'s' if count > 1 else ''} {name} asked for")
        for row in matching[count:]
    ]


def _matches(spec, row):
    answerable = {key: value for key, value in spec.items() if key in ROW_SPEC_KEYS}
    return spec_matches(answerable, {key: getattr(row, key) for key in ROW_SPEC_KEYS})


# ------------------------------------------------------------------ allocations


def uncovered(rows, allocations):
    """Instances whose allocation on their node covers fewer devices of a pool than
    they hold there. ``rows``: devices held by live instances; ``allocations``: rows
    (compute_node_id, consumer_uuid, resource, used). Pools compare without their
    device_spec tags, which device rows do not carry."""
    held = collections.Counter()
    nodes = {}
    for row in filter(_on_its_node, rows):
        if row.vm_state != "error":
            key = (row.compute_node_id, row.instance_uuid, untagged_resource(_pool_key(row)))
            held[key] += 1
            nodes[row.compute_node_id] = node_of(row)
    allocated = collections.Counter()
    for row in allocations:
        if row.resource.startswith(capacity.PCI_PREFIX):
            untagged = row.resource.rsplit(":", 1)[0]
            allocated[(row.compute_node_id, row.consumer_uuid, untagged)] += row.used
    found = []
    for (node_id, instance_uuid, resource), count in sorted(held.items()):
        covered = allocated[(node_id, instance_uuid, resource)]
        if covered < count:
            problem = f"covers {covered} of the {count} {resource} devices it holds"
            found.append(
                Finding(
                    "uncovered",
                    nodes[node_id],
                    f"allocation of {instance_uuid}",
                    problem,
                    instance_uuid=instance_uuid,
                )
            )
    return found


def _pool_key(row):
    return capacity.PoolKey.of(row, {})


def untagged_resource(key):
    """A pool's resource name without its tags' digest."""
    return capacity.resource_name(key).rsplit(":", 1)[0]


# ------------------------------------------------------------------------ pools


class PublishedTags:
    """The device_spec tags of a node's devices, as its compute published them in its
    inventory pools (the audit has not the compute's configuration). ``unknown``
    collects the pools of devices whose tags no published pool, or more than one,
    gives."""

    def __init__(self, inventory):
        self._tags, self._ambiguous, self.unknown = {}, set(), set()
        for pool in inventory or ():
            key = _untagged(pool, _group(pool))
            if self._tags.setdefault(key, pool.tags) != pool.tags:
                self._ambiguous.add(key)

    def tags_for(self, report):
        """The tags of a device (as a hypervisor report entry)."""
        device = types.SimpleNamespace(**report)
        key = _untagged(device, capacity.group_of(device))
        if key in self._ambiguous or key not in self._tags:
            self.unknown.add(key)
            return {}
        return dict(self._tags[key])


def _group(pool):
    """A published pool's group: None in free pools, which do not carry one."""
    return pool.group if pool.obj_attr_is_set("group") else None


def _untagged(pool, group):
    return (pool.vendor_id, pool.product_id, pool.numa_node, pool.dev_type, group)


def pool_findings(node, published, rows_say):
    """Pools of ``node`` (id, host, name) published in ``published`` and recomputed from
    its device rows in ``rows_say`` ({"pci_stats": PciDevicePoolList, "pci_inventory":
    PciDevicePoolList}) that count different numbers of devices, tags aside."""
    found = []
    for column, what in (("pci_stats", "free"), ("pci_inventory", "inventory")):
        said, counted = _counts(published[column]), _counts(rows_say[column])
        for key in sorted(said.keys() | counted.keys(), key=str):
            if said[key] != counted[key]:
                problem = f"published with {said[key]}, its device rows say {counted[key]}"
                found.append(Finding("pools", node, f"{what} pool {_describe(key)}", problem))
    return found


def _counts(pool_list):
    counts = collections.Counter()
    for pool in pool_list or ():
        counts[_untagged(pool, _group(pool))] += pool.count
    return counts


def _describe(key):
    vendor, product, numa, dev_type, group = key
    where = "" if numa is None else f" on NUMA node {numa}"
    of = f" of {group}" if group and dev_type != "type-PF" else ""
    return f"{vendor}:{product} {dev_type}{of}{where}"
