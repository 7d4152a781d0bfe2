"""Pools: a node's free PCI devices grouped by kind, so that claims need not scan devices.

A pool holds the *available* devices that share a vendor, product, NUMA node, device
type, group (a PF with its VFs: VFs are pooled per PF, each PF alone) and device_spec
tags. The tracker keeps pools in step with device statuses (``update_device``);
requests are planned against pools:

- ``support_requests`` answers, without changing anything, whether the requests fit
  (the scheduler asks it of a node's published pools, which carry counts only);
- ``allocation_for`` says which pools, and how many of each, the requests would take
  of a node's free capacity (``from_capacity``: its inventory less its allocations,
  each pool bounded by the counter it shares, see ``pci/capacity.py``);
- ``consume_requests`` picks devices and claims them for an instance (the compute),
  from the pools its allocation names when it has one.

PF and vDPA pools serve only requests that ask for that device type. NUMA policies,
for a guest on NUMA nodes ``numa_cells``, each taking devices on those nodes first:
``required`` takes devices on those nodes only; ``legacy`` (the default) then devices
with no NUMA node; ``preferred`` then devices with no NUMA node, then any other;
``socket`` then devices on other nodes of the same sockets. A guest without NUMA
topology (``numa_cells=None``) may use any device.

Non-empty pools are indexed by (vendor, product, type, NUMA node), so the cost of a
claim does not grow with the number of devices or pools on the node.
"""

import collections
import dataclasses

from pcisim import exception
from pcisim.objects import pci_device_pool
from pcisim.objects.fields import PciDeviceType
from pcisim.pci import capacity
from pcisim.pci.request import spec_matches

REQUEST_ONLY_TYPES = frozenset({PciDeviceType.SRIOV_PF, PciDeviceType.VDPA})
LEGACY, REQUIRED, PREFERRED, SOCKET = "legacy", "required", "preferred", "socket"
# What a device's claim raises when its status or its relatives' forbid it.
CLAIM_REFUSALS = (
    exception.PciDeviceInvalidStatus,
    exception.PciDeviceInvalidOwner,
    exception.PciDeviceVFInvalidStatus,
    exception.PciDevicePFInvalidStatus,
)


@dataclasses.dataclass(eq=False)
class Pool:
    """Free devices of one kind; ``count`` only, when built from published pools or a
    node's free capacity (then drawing ``cost`` a device on ``counter``)."""

    vendor_id: str
    product_id: str
    numa_node: int | None
    dev_type: str
    group: str | None
    tags: tuple
    devices: dict = dataclasses.field(default_factory=dict)
    published_count: int | None = None
    counter: str | None = None
    cost: int = 1

    @property
    def key(self):
        return (
            self.vendor_id,
            self.product_id,
            self.numa_node,
            self.dev_type,
            self.group,
            self.tags,
        )

    @property
    def parent_addr(self):
        return self.group if self.dev_type == PciDeviceType.SRIOV_VF else None

    @property
    def resource(self):
        return capacity.resource_name(self)

    @property
    def bucket(self):
        return (self.vendor_id, self.product_id, self.dev_type, self.numa_node)

    @property
    def count(self):
        return len(self.devices) if self.published_count is None else self.published_count

    def candidate(self):
        """What a request spec is matched against."""
        return {
            "vendor_id": self.vendor_id,
            "product_id": self.product_id,
            "dev_type": self.dev_type,
            **dict(self.tags),
        }


class PciDeviceStats:
    """The pools of one compute node."""

    def __init__(self, tags_for=None, numa_sockets=None):
        self._tags_for = tags_for or (lambda device: {})
        self._numa_sockets = numa_sockets or {}
        self._counters_left = {}  # counter -> capacity left (from_capacity only)
        self._buckets = collections.defaultdict(dict)  # bucket -> {pool key: Pool}
        self._pool_of = {}  # device address -> the Pool holding it
        self._published = (None, None)  # (counts, the PciDevicePoolList made of them)

    # ----------------------------------------------------------- bookkeeping

    def update_device(self, device):
        """Put ``device`` in its pool when it is available, take it out otherwise."""
        self._discard(device)
        if device.is_available():
            self._pool_for(device).devices[device.address] = device
            self._pool_of[device.address] = self._pool_for(device)

    def remove_device(self, device):
        """Take a pooled (free) ``device`` out of its pool, as Nova does; raises
        ``PciDevicePoolEmpty`` for a device no pool holds: a caller that thinks it
        free when it is not has lost track of it."""
        if device.address not in self._pool_of:
            raise exception.PciDevicePoolEmpty(
                compute_node_id=device.compute_node_id, address=device.address
            )
        self._discard(device)

    def discard_device(self, device):
        """Take ``device`` out of its pool if one holds it (a device leaving the node)."""
        self._discard(device)

    def _discard(self, device):
        pool = self._pool_of.pop(device.address, None)
        if pool is None:
            return
        del pool.devices[device.address]
        if not pool.devices:
            del self._buckets[pool.bucket][pool.key]

    def _pool_for(self, device):
        tags = tuple(sorted(self._tags_for(device).items()))
        group = capacity.group_of(device)
        pool = Pool(
            device.vendor_id, device.product_id, device.numa_node, device.dev_type, group, tags
        )
        return self._buckets[pool.bucket].setdefault(pool.key, pool)

    def pools(self):
        return [pool for bucket in self._buckets.values() for pool in bucket.values()]

    def __len__(self):
        return sum(pool.count for pool in self.pools())

    # ------------------------------------------------------------ publishing

    def to_device_pools_obj(self):
        """The pools as the compute node publishes them for the scheduler: the same
        object as last time while the counts are the same, so that a caller that
        publishes it again can tell it unchanged by identity (a resource tracker stages
        its node before and after each save). Callers do not change it."""
        counts = collections.Counter()
        for pool in self.pools():
            counts[(pool.vendor_id, pool.product_id, pool.numa_node, pool.dev_type, pool.tags)] += (
                pool.count
            )
        counted = sorted(counts.items(), key=str)
        if counted == self._published[0]:
            return self._published[1]
        pools = pci_device_pool.PciDevicePoolList.of(
            [
                pci_device_pool.PciDevicePool(
                    vendor_id=v, product_id=p, numa_node=n, dev_type=t, tags=dict(tags), count=count
                )
                for (v, p, n, t, tags), count in counted
            ],
            self._numa_sockets or None,
        )
        self._published = (counted, pools)
        return pools

    @classmethod
    def from_device_pools(cls, pool_list):
        """Count-only pools, as the scheduler sees a node (in the legacy mode), on the
        NUMA layout the pool list carries."""
        stats = cls(numa_sockets=pool_list.socket_map() if pool_list else None)
        for published in pool_list or ():
            pool = Pool(
                published.vendor_id,
                published.product_id,
                published.numa_node,
                published.dev_type,
                None,
                tuple(sorted(published.tags.items())),
                published_count=published.count,
            )
            if pool.count:
                stats._buckets[pool.bucket][pool.key] = pool
        return stats

    @classmethod
    def from_capacity(cls, inventory, used, numa_sockets=None):
        """Count-only pools of what is free of a node's PCI ``inventory`` (inventory
        pools: PciDevicePool with ``group``, ``count`` the total) once the allocations
        ``used`` ({resource: used}) are taken, each bounded by its counter, on a node
        whose NUMA layout is ``numa_sockets`` ({NUMA node: socket})."""
        by_name, sizes = capacity.draws(inventory)
        stats = cls(numa_sockets=numa_sockets)
        stats._counters_left = capacity.counters_left(by_name, sizes, used)
        for published in inventory:
            name = capacity.resource_name(published)
            draw = by_name[name]
            pool = Pool(
                published.vendor_id,
                published.product_id,
                published.numa_node,
                published.dev_type,
                published.group,
                tuple(sorted(published.tags.items())),
                published_count=published.count - used.get(name, 0),
                counter=draw.counter,
                cost=draw.cost,
            )
            if pool.count > 0 and stats._counters_left[draw.counter] >= draw.cost:
                stats._buckets[pool.bucket][pool.key] = pool
        return stats

    # -------------------------------------------------------------- planning

    def support_requests(self, requests, numa_cells=None):
        """Whether ``requests`` (InstancePCIRequest list) fit; changes nothing."""
        return self._plan(requests, numa_cells) is not None

    def allocation_for(self, requests, numa_cells=None):
        """{pool resource name: devices} that ``requests`` would take of count-only
        pools, or None when they do not fit; changes nothing."""
        plan = self._plan(requests, numa_cells)
        if plan is None:
            return None
        return dict(collections.Counter(pool.resource for _, taken in plan for pool in taken))

    def consume_requests(self, requests, instance_uuid, numa_cells=None, allocation=None):
        """Pick and claim devices for every request, or raise and claim nothing.

        With ``allocation`` ({pool resource name: devices}, what the scheduler
        reserved), devices come only from those pools, at most that many of each.
        Returns the claimed devices. Raises ``PciDeviceRequestFailed`` when the
        requests do not fit, or when a device of the plan refuses its claim: then the
        devices claimed before it are freed again.
        """
        plan = self._plan(requests, numa_cells, allocation)
        if plan is None:
            raise exception.PciDeviceRequestFailed(
                requests=_describe(requests), reason="not enough free devices that match"
            )
        claimed = []
        try:
            for request, devices in plan:
                for device in devices:
                    self._apply(device.claim(instance_uuid, request.request_id))
                    claimed.append(device)
        except CLAIM_REFUSALS as error:
            # NOTE: a pool held a device its relatives keep from being claimed; the
            # claims made so far must not outlive the request, or those devices would
            # stay out of their pools, held by nobody.
            for device in reversed(claimed):
                self._apply(device.free(instance_uuid))
            raise exception.PciDeviceRequestFailed(
                requests=_describe(requests), reason=str(error)
            ) from error
        return claimed

    def _apply(self, changed):
        for device in changed:
            self.update_device(device)

    def _plan(self, requests, numa_cells, allocation=None):
        """[(request, devices)] that satisfy every request together, or None; for
        count-only pools, each device is the pool it would come from."""
        state = _PlanState(self._counters_left, allocation)
        plan = []
        for request in requests:
            picked = self._plan_request(request, numa_cells, state)
            if picked is None:
                return None
            plan.append((request, picked))
        return plan

    def _plan_request(self, request, numa_cells, state):
        picked = []
        for pool in self._candidate_pools(request, numa_cells):
            picked += state.take(pool, request.count - len(picked))
            if len(picked) == request.count:
                return picked
        return None

    def _candidate_pools(self, request, numa_cells):
        """The pools that may serve ``request``, the closest to the guest's NUMA nodes
        first (see ``_numa_rank``); among equally close ones, in the order they came."""
        policy = request.numa_policy if request.obj_attr_is_set("numa_policy") else None
        policy = policy or LEGACY
        ranks = {bucket: self._numa_rank(policy, bucket[3], numa_cells) for bucket in self._buckets}
        buckets = sorted((b for b, rank in ranks.items() if rank is not None), key=ranks.get)
        for bucket in buckets:
            for pool in self._buckets[bucket].values():
                if any(_serves(spec, pool) for spec in request.spec):
                    yield pool

    def _numa_rank(self, policy, numa_node, numa_cells):
        """How close devices on ``numa_node`` are to a guest on ``numa_cells``: 0 for
        the guest's own nodes (any node, for a guest without NUMA topology), then 1 and
        2 for what ``policy`` falls back to, None for what it refuses.

        As Nova filters (``required``, then ``legacy``, then ``preferred``, taking
        the strictest set that is enough), so a plan takes the guest's own nodes first:
        ``legacy`` then devices with no NUMA node; ``preferred`` those, then any other
        node; ``socket`` then the other nodes of the guest's sockets (a node not in the
        socket map is a socket of its own, so without a map ``socket`` is ``required``).
        """
        if numa_cells is None or numa_node in numa_cells:
            return 0
        if policy == SOCKET:
            sockets = {self._numa_sockets.get(cell, cell) for cell in numa_cells}
            same_socket = self._numa_sockets.get(numa_node, numa_node) in sockets
            return 1 if numa_node is not None and same_socket else None
        if policy in (LEGACY, PREFERRED) and numa_node is None:
            return 1
        return 2 if policy == PREFERRED else None


def _serves(spec, pool):
    if pool.dev_type in REQUEST_ONLY_TYPES and spec.get("dev_type") != pool.dev_type:
        return False
    return spec_matches(spec, pool.candidate())


class _PlanState:
    """What a plan has taken so far, so one plan never uses a PF and one of its VFs,
    never draws a counter below zero, and takes no more of a pool than ``allocation``
    allows (when given)."""

    def __init__(self, counters_left, allocation=None):
        self.taken = collections.Counter()  # pool key -> count taken (count-only pools)
        self.chosen = set()  # addresses of chosen devices
        self.pfs_in_use = set()  # PFs that a chosen VF belongs to, or that were chosen
        self.counters_left = dict(counters_left)
        self.allowed = None if allocation is None else collections.Counter(allocation)

    def take(self, pool, wanted):
        if pool.published_count is not None:
            return self._take_count(pool, wanted)
        if self.allowed is not None:
            wanted = min(wanted, self.allowed[pool.resource])
        if pool.parent_addr in self.chosen:
            return []
        picked = []
        for address, device in pool.devices.items():
            if len(picked) == wanted:
                break
            if address not in self.chosen and address not in self.pfs_in_use:
                picked.append(device)
        self._record(pool, picked)
        return picked

    def _take_count(self, pool, wanted):
        n = min(wanted, pool.count - self.taken[pool.key])
        if pool.counter is not None:
            n = min(n, self.counters_left[pool.counter] // pool.cost)
            self.counters_left[pool.counter] -= n * pool.cost
        self.taken[pool.key] += n
        return [pool] * n

    def _record(self, pool, picked):
        if self.allowed is not None:
            self.allowed[pool.resource] -= len(picked)
        for device in picked:
            self.chosen.add(device.address)
            self.pfs_in_use.add(device.address if pool.parent_addr is None else pool.parent_addr)


def _describe(requests):
    def name(request):
        return request.alias_name if request.obj_attr_is_set("alias_name") else None

    return ", ".join(f"{name(r) or 'spec'}:{r.count}" for r in requests)
