"""Choosing a node for a new instance, and claiming what it needs there.

Two modes (``[scheduler] claim_mode``):

``allocations`` (the default)
    The choice reads each node's inventory and the allocations on it, and writes the
    instance's allocation in the same transaction as a compare-and-swap on the node's
    generation (``db/allocations.py``), and as the instance's row with its node. A
    choice made from a view another allocation made stale fails that swap, and is made
    again from a fresh view, here: it never becomes a reschedule through the compute.
    Among the ``[filter_scheduler] host_subset_size`` best nodes the choice is random,
    and nodes tied for a place rank in random order, so that concurrent requests seldom
    collide at all. Within one conductor they never lose a swap to each other: a node
    one thread is claiming on ranks last for the others, and threads that chose it
    anyway claim one after the other, each from the node as the one before left it
    (``HostStates.claiming``). The swap guards against the writers that lock does not
    reach: other conductors, and the computes' heals. A read of the nodes serves the
    choices that follow it for ``[scheduler] view_max_age`` seconds, with this
    scheduler's own claims noted in it; the swap refuses what it missed.

``legacy``
    The choice uses what the computes published (their usage and free PCI pools), so
    it can be stale; the compute's claim is the authority, and a claim that fails there
    sends the instance back here for another node.
"""

import datetime
import functools
import random
import threading
import time

from oslo_db import exception as db_exc
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import timeutils

from pcisim import conf as pcisim_conf
from pcisim import exception, faults
from pcisim.compute import BINARY as COMPUTE_BINARY
from pcisim.conductor import host_states, shared_reads
from pcisim.db import allocations as db_allocations
from pcisim.db import api as db_api
from pcisim.db import engine as db_engine
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci.stats import PciDeviceStats

LOG = logging.getLogger(__name__)
# NOTE: each conflict means another allocation was written meanwhile, so the retries
# make progress; this only bounds a request that keeps losing.
MAX_GENERATION_CONFLICTS = 50
_conflicts = 0
_conflicts_lock = threading.Lock()


class Scheduler:
    """One conductor's scheduler, with its cached view of the nodes (``HostStates``)."""

    def __init__(self):
        self.host_states = host_states.HostStates()
        # the nodes and the hosts up, read once for the requests that ask together
        self.view = shared_reads.SharedRead(self._read_view)
        self._kept = None  # (the hosts up, when the last read of the view began)

    def claim_destination(
        self, context, instance, numa_cells=None, exclude=(), record=None, numa_nodes=None
    ):
        """Choose a node for ``instance``, allocate what it needs there and run
        ``record(host, node)`` (which writes the instance's row), all in one transaction.
        A guest of ``numa_nodes`` NUMA cells (a flavor's ``hw:numa_nodes``) is placed
        on as many host cells of the node, its PCI devices chosen by them.

        Returns ``(host, node, allocation, numa_cells)``, the allocation as {resource:
        used}, the guest's host cells as a sorted list (None: no NUMA topology). Raises
        ``NoValidHost`` when no node that is up and not in ``exclude`` has room, or after
        ``MAX_GENERATION_CONFLICTS`` choices lost to other claims (a lost swap, a
        transaction lost to a deadlock, or room another thread took first).
        """
        wanted = Wanted(instance, numa_cells, numa_nodes)
        for _ in range(MAX_GENERATION_CONFLICTS):
            chosen = self._choose(context, exclude, wanted)
            try:
                claimed = self._claim(context, instance, chosen, wanted, record)
            except exception.ComputeNodeGenerationConflict as error:
                LOG.debug("Choosing again for %s: %s", instance.uuid, error)
                _count_conflict()
            except db_exc.DBDeadlock:
                # NOTE: MariaDB picks a victim when the claim's locks (the node row,
                # the allocations' index) cross another writer's, an archive's say;
                # the victim's transaction was rolled back whole, so choose again.
                LOG.info("Choosing again for %s: the database rolled its claim back", instance.uuid)
            else:
                if claimed is not None:
                    return claimed
        raise exception.NoValidHost(
            reason=f"{MAX_GENERATION_CONFLICTS} nodes chosen were allocated by others first"
        )

    def _claim(self, context, instance, chosen, wanted, record):
        """``claim_destination``'s answer from a claim on the node ``chosen``, or None
        when another thread of this scheduler took the room there first."""
        with self.host_states.claiming(chosen) as node:
            allocation = node.allocation_for(wanted)
            if allocation is None:
                return None
            faults.point(faults.BEFORE_ALLOCATION_CLAIM, instance=instance, node_id=node.id)
            try:
                with db_engine.write_transaction(context, core=True):
                    generation = db_allocations.claim(
                        context, node.id, node.generation, instance.uuid, allocation
                    )
                    if record is not None:
                        record(node.host, node.nodename)
            except exception.ComputeNodeGenerationConflict:
                self.host_states.lost(node)
                self._kept = None
                raise
            self.host_states.claimed(node, generation, allocation)
        cells = node.numa_cells_for(wanted)
        cells = sorted(cells) if cells is not None else None
        return node.host, node.nodename, allocation, cells

    def _choose(self, context, exclude, wanted):
        """The NodeState chosen from the view of the nodes; a view that finds no room
        is read again whole before that is the answer."""
        for last in (False, True):
            up, nodes = self.view(context) if last else self._kept_view(context)
            try:
                return _choose(nodes, up, exclude, wanted, self.host_states.busy())
            except exception.NoValidHost:
                if last:
                    raise
                # NOTE: cheap where it is rare (a cloud with room); a full one pays
                # what every request paid before the view was kept by its signature.
                self.host_states.forget()
                self._kept = None

    def _kept_view(self, context):
        """(the hosts up, every live node's NodeState): the last view read, with this
        scheduler's claims since, while it is younger than ``[scheduler]
        view_max_age`` and no claim has found it wrong; else a read.

        NOTE: during a burst of boots nothing but this scheduler's own claims moves
        the nodes, and reading the view to learn so was a third of each choice's CPU.
        What others change meanwhile can make a kept view stale, never a claim wrong:
        the node's generation refuses a claim made from it, and a choice that finds
        no room reads again before it answers so."""
        kept = self._kept
        if kept is not None:
            up, began = kept
            if time.monotonic() - began < pcisim_conf.CONF.scheduler.view_max_age:
                return up, self.host_states.known()
        return self.view(context)

    def _read_view(self, context):
        """(the hosts up, every live node's NodeState), in one read transaction; run
        once for every request that asked while the read before it ran, and kept
        for the requests that follow (``_kept_view``)."""
        began = time.monotonic()
        faults.point(faults.BEFORE_VIEW_READ, context=context)
        with db_engine.read_transaction(context):
            up, nodes = _up_hosts(context), self.host_states.current(context)
        # NOTE: a read under way when a claim found the view wrong is kept all the
        # same; a claim made from it that is wrong too is refused the same way.
        self._kept = (up, began)
        return up, nodes


def generation_conflicts():
    """How many generation swaps this process's schedulers have lost (and chosen again
    after) since it started: the price of concurrent requests choosing the same node,
    which ``host_subset_size`` trades against packing (bench/scale.py reports it)."""
    return _conflicts


def _count_conflict():
    global _conflicts
    # NOTE: a lock, because += on a global is not atomic across threads; it is taken
    # only on a lost swap, which already cost a transaction.
    with _conflicts_lock:
        _conflicts += 1


class Wanted:
    """What an instance asks of a node: resources and PCI requests; ``key`` is the
    same for every request that asks the same (text, whose hash Python keeps: it is
    looked up once per node and request), and so are those asking equal."""

    def __init__(self, instance, numa_cells, numa_nodes=None):
        self.numa_nodes = numa_nodes
        self.resources = {
            name: getattr(instance, field) or 0 for name, field in capacity.FLAVOR_RESOURCES.items()
        }
        self.requests = list(instance.pci_requests.requests) if instance.pci_requests else []
        self.numa_cells = frozenset(numa_cells) if numa_cells else None
        self.description = _flavor(instance)
        self.key = repr(
            (
                sorted(self.resources.items()),
                [_request_key(request) for request in self.requests],
                sorted(self.numa_cells or ()) if self.numa_cells is not None else None,
                numa_nodes,
            )
        )

    def __eq__(self, other):
        return isinstance(other, Wanted) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _request_key(request):
    policy = request.numa_policy if request.obj_attr_is_set("numa_policy") else None
    return request.count, jsonutils.dumps(request.spec, sort_keys=True), policy


def _up_hosts(context):
    down_after = datetime.timedelta(seconds=pcisim_conf.CONF.service_down_time)
    seen_since = timeutils.utcnow() - down_after
    return db_api.service_hosts_up(context, COMPUTE_BINARY, seen_since)


def _choose(nodes, up, exclude, wanted, busy=frozenset()):
    """The NodeState chosen at random among the best of ``nodes`` (``host_states.Nodes``)
    that fit, those not ``busy`` (ids of nodes another thread is claiming on) first."""
    excluded = {tuple(place) for place in exclude}
    size = pcisim_conf.CONF.filter_scheduler.host_subset_size
    candidates = (n for n in nodes.ranked() if n.host in up and n.place not in excluded)
    best = _best_fitting(candidates, wanted, size, busy)
    if not best:
        raise _no_valid_host(nodes, up, excluded, wanted)
    return random.choice(best)


def _no_valid_host(nodes, up, excluded, wanted):
    """``NoValidHost`` saying why none of ``nodes`` fits ``wanted``."""
    nodes = [n for n in nodes if n.host in up and n.place not in excluded]
    if not nodes:
        return exception.NoValidHost(reason="no compute service is up that was not tried")
    if not any(n.has_room(wanted.resources) for n in nodes):
        return exception.NoValidHost(reason=f"no node has {wanted.description} free")
    return exception.NoValidHost(
        reason=f"no node can provide PCI devices {_names(wanted.requests)}"
    )


def _best_fitting(ranked, wanted, size, busy=frozenset()):
    """The first ``size`` nodes of ``ranked`` (most free memory first) that fit
    ``wanted``, among those not ``busy`` if any fits; else among the busy ones.

    Nodes tied on free memory (identical nodes, at first all of them) rank in a random
    order, and a node another thread of this scheduler is claiming on ranks after every
    other: otherwise every request would choose among the same first few, and
    concurrent ones would lose each other's swaps. Whether a node fits is planned
    only for nodes in that order until ``size`` fit: with 1,000 nodes, most are never
    planned for, nor even reached.
    """
    best, claimed_by_others = [], []
    for node in ranked:
        if node.allocation_for(wanted) is None:
            continue
        if node.id in busy:
            claimed_by_others.append(node)
            continue
        best.append(node)
        if len(best) == size:
            break
    return best or claimed_by_others[:size]


def select_destination(context, instance, numa_cells=None, exclude=()):
    """The legacy mode's choice: the (host, node) with the most free memory that fits
    by what the computes published, or ``NoValidHost``."""
    up = _up_hosts(context)
    # NOTE: rows, not ComputeNode objects: with 1,000 nodes, building the objects and
    # their pool objects took 90% of the 270 ms a request cost (bench/scale.py).
    nodes = [
        n
        for n in db_api.compute_node_get_all(context)
        if n.host in up and [n.host, n.hypervisor_hostname] not in exclude
    ]
    if not nodes:
        raise exception.NoValidHost(reason="no compute service is up that was not tried")
    fitting = [n for n in nodes if _fits(n, instance)]
    if not fitting:
        raise exception.NoValidHost(reason=f"no node has {_flavor(instance)} free")
    requests = list(instance.pci_requests.requests) if instance.pci_requests else []
    pci_fits = _pci_filter(requests, numa_cells)
    fitting = [n for n in fitting if pci_fits(n.pci_stats)]
    if not fitting:
        raise exception.NoValidHost(reason=f"no node can provide PCI devices {_names(requests)}")
    best = max(fitting, key=lambda n: n.memory_mb - n.memory_mb_used)
    return best.host, best.hypervisor_hostname


def _fits(node, instance):
    return all(
        (getattr(instance, wanted) or 0) <= getattr(node, total) - getattr(node, f"{total}_used")
        for total, wanted in (
            ("vcpus", "vcpus"),
            ("memory_mb", "memory_mb"),
            ("local_gb", "root_gb"),
        )
    )


def _pci_filter(requests, numa_cells):
    """Whether a node's published pools (its ``pci_stats`` column) can serve ``requests``.

    Nodes that publish the same pools get the same answer, so each distinct
    ``pci_stats`` is planned once per request: most nodes of a large cloud look alike.
    """
    if not requests:
        return lambda pci_stats: True
    cells = set(numa_cells) if numa_cells else None

    @functools.cache
    def fits(pci_stats):
        stats = PciDeviceStats.from_device_pools(PciDevicePoolList.from_json(pci_stats))
        return stats.support_requests(requests, cells)

    return fits


def _flavor(instance):
    return (
        f"{instance.vcpus or 0} vCPUs, {instance.memory_mb or 0} MB of memory and "
        f"{instance.root_gb or 0} GB of disk"
    )


def _names(requests):
    return ", ".join(f"{r.alias_name}:{r.count}" for r in requests)
