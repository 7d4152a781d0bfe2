"""The scheduler's view of every node, cached and kept true by the nodes' generations.

Reading every node's row, PCI inventory and allocations for each request cost the
scheduler most of its time at 1,000 nodes. A node's generation changes with every
change of its inventory or allocations (``db/allocations.py``), so a request reads
only each node's generation, and the full state of the nodes whose generation moved;
and while one summed row (``nodes_signature``) says no node changed, not even that.
What a request needs of a node (does it fit, and what would it take) is planned once
per generation of that node and kind of request.

Threads of one scheduler that chose the same node claim on it one after the other,
each from the node as the claim before left it (``claiming``). A view can still be
stale by the time the allocation is written, when another conductor allocated on the
node meanwhile: the compare-and-swap of ``db.allocations.claim`` refuses it then, and
the scheduler chooses again.
"""

import collections
import contextlib
import copy
import functools
import itertools
import random
import threading

from pcisim.db import allocations as db_allocations
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci.stats import PciDeviceStats

PCI = capacity.PCI_PREFIX


class NodeState:
    """One node at one generation: its totals, its allocations' sums, its inventory."""

    def __init__(self, row, used):
        self.id, self.host, self.nodename = row.id, row.host, row.hypervisor_hostname
        self.place = (self.host, self.nodename)
        self.generation = row.generation
        self.totals = {name: getattr(row, column) for name, column in capacity.NODE_TOTALS.items()}
        self.pci_inventory = row.pci_inventory
        inventory = _inventory(row.pci_inventory)
        self.inventory, self.numa_sockets = inventory.objects, inventory.socket_map()
        self._use(used)

    def _use(self, used):
        self.used = used
        self._pci_used = tuple(
            sorted((name, amount) for name, amount in used.items() if name.startswith(PCI))
        )
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
                devices = _pci_allocation(self.pci_inventory, self._pci_used, wanted, cells)
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


class Nodes:
    """Every live node's ``NodeState`` at one moment, in tiers of equal free memory:
    never changed once made, so that requests may share it while claims move on.

    The tiers make ranking the nodes cost what a request reaches of them: with 1,000
    nodes, sorting them all and filtering them for each request cost more than the
    rest of its choice. A claim moves one node between two tiers (``replacing``).
    """

    def __init__(self, states=()):
        self._by_id = {state.id: state for state in states}
        tiers = collections.defaultdict(dict)
        for state in self._by_id.values():
            tiers[state.free_memory][state.id] = state
        self._tiers = dict(tiers)  # free memory -> {node id: NodeState}

    def __iter__(self):
        return iter(self._by_id.values())

    def get(self, node_id):
        return self._by_id.get(node_id)

    def generations(self):
        """{node id: generation} of every node."""
        return {node_id: state.generation for node_id, state in self._by_id.items()}

    def ranked(self):
        """The nodes by free memory, most first, those tied in random order, lazily:
        only the ties the caller reaches are shuffled."""
        for free_memory in sorted(self._tiers, reverse=True):
            yield from _shuffled(list(self._tiers[free_memory].values()))

    def replacing(self, state):
        """These nodes with ``state`` in place of the node of its id."""
        old = self._by_id[state.id]
        tiers = dict(self._tiers)
        left = tiers[old.free_memory] = dict(tiers[old.free_memory])
        del left[state.id]
        if not left:
            del tiers[old.free_memory]
        tiers[state.free_memory] = {**tiers.get(state.free_memory, {}), state.id: state}
        replaced = Nodes()
        replaced._by_id, replaced._tiers = {**self._by_id, state.id: state}, tiers
        return replaced


def _shuffled(items):
    """``items`` in random order, shuffled as far as they are consumed (Fisher-Yates)."""
    for i in range(len(items)):
        j = random.randrange(i, len(items))
        items[i], items[j] = items[j], items[i]
        yield items[i]


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
        self._nodes = Nodes()
        self._signature = None  # nodes_signature when self._nodes was read, and claimed since
        self._claiming = collections.Counter()  # node id -> threads claiming on it or waiting to
        self._node_locks = {}  # node id -> the lock of claims on it, while any is under way
        self._lock = threading.Lock()

    def current(self, context):
        """Every live node as it is now (``Nodes``): one query when none changed, else
        two more, and two for those changed."""
        signature = db_allocations.nodes_signature(context)
        with self._lock:
            if signature == self._signature:
                return self._nodes
            known = self._nodes
        rows, usage, live = db_allocations.changed_host_states(context, known.generations())
        nodes = {state.id: state for state in known if state.id in live}
        nodes.update((row.id, NodeState(row, usage.get(row.id, {}))) for row in rows)
        with self._lock:
            # NOTE: a claim of another thread may have moved a node on while this one
            # read; its state is newer than the one read, and the signature counts it
            # from there: it can only count a node at or below its generation in the
            # view, so it matches the database's only when the view is exact.
            moved = 0
            for state in self._nodes:
                read = nodes.get(state.id)
                if read is not None and state.generation > read.generation:
                    nodes[state.id] = state
                    moved += state.generation - read.generation
            self._nodes, self._signature = Nodes(nodes.values()), _moved(signature, moved)
            return self._nodes

    def known(self):
        """Every live node as this scheduler knows it without reading (``Nodes``): as
        the last read found them, with its own claims since."""
        with self._lock:
            return self._nodes

    def claimed(self, node, generation, allocation):
        """Note that this scheduler's ``allocation`` on ``node`` (a NodeState) moved it
        to ``generation``: the next request need not read it again. A view that has
        read the node at that generation or later meanwhile is left as it is."""
        with self._lock:
            cached = self._nodes.get(node.id)
            if cached is None or cached.generation >= generation:
                return
            self._nodes = self._nodes.replacing(node.after_claim(generation, allocation))
            # NOTE: the signature counts each node at most at the generation the view
            # holds it, so it never matches the database's while the view is stale.
            if self._signature is not None:
                self._signature = _moved(self._signature, generation - cached.generation)

    def lost(self, node):
        """Note that a claim on ``node`` (a NodeState) lost its swap: unless the view
        has the node at a later generation already, the next request reads every
        node's generation again."""
        with self._lock:
            cached = self._nodes.get(node.id)
            if cached is None or cached.generation <= node.generation:
                self._signature = None

    def forget(self):
        """Make the next request read every node's generation again."""
        with self._lock:
            self._signature = None

    def busy(self):
        """{node id: how many of this scheduler's threads are claiming on it now, or
        waiting to}, for the nodes any is."""
        with self._lock:
            return collections.Counter(self._claiming)

    @contextlib.contextmanager
    def claiming(self, node):
        """Claim on ``node`` (a NodeState) alone among this scheduler's threads while
        the block runs; yields the node as the view has it by then, which another
        thread's claim may have moved on since ``node`` was chosen.

        Threads of one scheduler that chose the same node write their claims one after
        the other, each from the node as the one before left it, so they never lose a
        swap to each other; ``busy`` meanwhile steers the others to other nodes. A
        thread may claim again on a node it holds (a fault point's injection does).
        """
        with self._lock:
            self._claiming[node.id] += 1
            lock = self._node_locks.setdefault(node.id, threading.RLock())
        try:
            with lock:
                yield self._latest(node)
        finally:
            with self._lock:
                self._claiming[node.id] -= 1
                if not self._claiming[node.id]:
                    del self._claiming[node.id], self._node_locks[node.id]

    def _latest(self, node):
        with self._lock:
            cached = self._nodes.get(node.id)
        return cached if cached is not None and cached.generation > node.generation else node


def _moved(signature, generations):
    """``signature`` (``nodes_signature``) after the nodes moved by ``generations``."""
    count, ids, total = signature
    return count, ids, total + generations


@functools.lru_cache(maxsize=1024)
def _inventory(text):
    return PciDevicePoolList.from_json(text)


@functools.lru_cache(maxsize=4096)
def _pci_allocation(inventory, pci_used, wanted, cells):
    """{pool resource: devices} that ``wanted`` (a ``Wanted``, hashed by what it asks)
    would take on ``cells`` of a node of PCI ``inventory`` (its JSON text) with
    ``pci_used`` ((resource, used) of its PCI allocations) taken, or None.

    Planned once for all the nodes alike: with 1,000 nodes of a few kinds, planning
    the PCI devices anew for each node a request reached (each claim makes its node
    new) was most of a choice's CPU. The answer is shared: never change it."""
    pools = _inventory(inventory)
    stats = PciDeviceStats.from_capacity(pools.objects, dict(pci_used), pools.socket_map())
    return stats.allocation_for(wanted.requests, cells)
