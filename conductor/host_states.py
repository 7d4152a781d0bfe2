"""The scheduler's view of every node, cached and kept true by the nodes' generations.

Reading every node's row, PCI inventory and allocations for each request cost the
scheduler most of its time at 1,000 nodes. A node's generation changes with every
change of its inventory or allocations (``db/allocations.py``), so a request reads
only each node's generation, and the full state of the nodes whose generation moved;
and while one summed row (``nodes_signature``) says no node changed, not even that.
What a request needs of a node (does it fit, and what would it take) is planned once
per generation of that node and kind of request.

A view can still be stale by the time the allocation is written: the compare-and-swap
of ``db.allocations.claim`` refuses it then, and the scheduler chooses again.
"""

import copy
import functools
import itertools
import threading

from pcisim.db import allocations as db_allocations
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci.stats import PciDeviceStats


class NodeState:
    """One node at one generation: its totals, its allocations' sums, its inventory."""

    def __init__(self, row, used):
        self.id, self.host, self.nodename = row.id, row.host, row.hypervisor_hostname
        self.place = (self.host, self.nodename)
        self.generation = row.generation
        self.totals = {name: getattr(row, column) for name, column in capacity.NODE_TOTALS.items()}
        inventory = _inventory(row.pci_inventory)
        self.inventory, self.numa_sockets = inventory.objects, inventory.socket_map()
        self._use(used)

    def _use(self, used):
        self.used = used
        self.free_memory = self.totals[capacity.MEMORY_MB] - used.get(capacity.MEMORY_MB, 0)
        # Wanted.key -> ({resource: used}, NUMA cells), or None when it does not fit
        self._plans = {}

    def after_claim(self, generation, allocation):
        """This node at ``generation``, which ``allocation`` alone led to."""
        claimed = copy.copy(self)
        claimed.generation = generation
        used = dict(self.used)
        for resource, amount in allocation.items():
            used[resource] = used.get(resource, 0) + amount
        claimed._use(used)
        return claimed

    def allocation_for(self, wanted):
        """{resource: used} that ``wanted`` (a ``Wanted``) would take here, or None."""
        plan = self._planned(wanted)
        return plan and plan[0]

    def numa_cells_for(self, wanted):
        """The host NUMA cells the guest of ``wanted`` would be on here: those it asked
        for, or for a guest of ``numa_nodes`` cells, the first cells that fit."""
        plan = self._planned(wanted)
        return plan and plan[1]

    def _planned(self, wanted):
        try:
            return self._plans[wanted.key]
        except KeyError:
            plan = self._plans[wanted.key] = self._plan(wanted)
            return plan

    def has_room(self, resources):
        return all(
            self.used.get(name, 0) + amount <= self.totals[name]
            for name, amount in resources.items()
        )

    def _plan(self, wanted):
        if not self.has_room(wanted.resources):
            return None
        for cells in self._cell_choices(wanted):
            devices = {}
            if wanted.requests:
                stats = PciDeviceStats.from_capacity(self.inventory, self.used, self.numa_sockets)
                devices = stats.allocation_for(wanted.requests, cells)
                if devices is None:
                    continue
            return {**wanted.resources, **devices}, cells
        return None

    def _cell_choices(self, wanted):
        """The guest's host cells to try: those it asked for, or each set of
        ``numa_nodes`` of this node's NUMA nodes in order (none when the node has
        fewer, or does not say: as Nova's NUMA filter, a guest of a NUMA topology
        fits only a host that has one)."""
        if wanted.numa_nodes is None:
            return [wanted.numa_cells]
        nodes = sorted(
            set(self.numa_sockets)
            | {pool.numa_node for pool in self.inventory if pool.numa_node is not None}
        )
        return [frozenset(cells) for cells in itertools.combinations(nodes, wanted.numa_nodes)]


class HostStates:
    """Every live node's ``NodeState``, shared by the scheduler's threads.

    With the nodes it keeps the signature of the nodes (``nodes_signature``) read
    before them: while the database's signature is that one, no node changed, and a
    request reads that one row instead of every node's generation. The signature is
    read before the generations in the same transaction, so the nodes are at least as
    new as it is: a change that lands between the two reads makes the next request
    read them again, never keeps a stale view. Its own claims move the signature as
    they move the node, so a scheduler that alone writes reads no generation at all.
    """

    def __init__(self):
        self._nodes = {}  # node id -> NodeState
        self._signature = None  # nodes_signature when self._nodes was read, and claimed since
        self._lock = threading.Lock()

    def current(self, context):
        """Every live node as it is now: one query when none changed, else two more,
        and two for those changed."""
        signature = db_allocations.nodes_signature(context)
        with self._lock:
            if signature == self._signature:
                return list(self._nodes.values())
            nodes = dict(self._nodes)
        known = {node_id: state.generation for node_id, state in nodes.items()}
        rows, usage, live = db_allocations.changed_host_states(context, known)
        nodes = {node_id: state for node_id, state in nodes.items() if node_id in live}
        nodes.update((row.id, NodeState(row, usage.get(row.id, {}))) for row in rows)
        with self._lock:
            self._nodes, self._signature = nodes, signature
        return list(nodes.values())

    def claimed(self, node, generation, allocation):
        """Note that this scheduler's ``allocation`` on ``node`` (a NodeState) moved it
        to ``generation``: the next request need not read it again. A view another
        thread has moved on meanwhile is left as it is."""
        with self._lock:
            if self._nodes.get(node.id) is node:
                self._nodes[node.id] = node.after_claim(generation, allocation)
                # NOTE: the view held the node at the generation the swap replaced,
                # so the signature read with it did not count this claim yet.
                if self._signature is not None:
                    count, ids, generations = self._signature
                    moved = generation - node.generation
                    self._signature = count, ids, generations + moved

    def forget(self):
        """Make the next request read every node's generation again."""
        with self._lock:
            self._signature = None


@functools.lru_cache(maxsize=1024)
def _inventory(text):
    return PciDevicePoolList.from_json(text)
