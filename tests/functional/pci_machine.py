"""A hypothesis state machine over the whole in-process control plane.

``PciMachine`` boots and deletes instances asking for GPUs, VFs and PFs, deletes them
while their compute is down (local deletes), crashes deletes and builds half-way,
archives (as a rule, and injected at the named points of ``pcisim.faults``), runs
periodic tasks, hot-unplugs and hot-plugs devices (free and held ones), restarts
computes and the conductor; after every step it reads the database directly (as
``tests/functional/flows.py`` does) and checks the invariants of the design.

The model is deliberately small: which instances exist, what they asked for, where
they landed, which hosts are down, which devices are unplugged, and which deleted
instances still wait for their compute's next periodic run to free their devices.
It never re-implements the tracker: what the devices' statuses must be is read from
the rows themselves (a PF follows its VFs) and from what each instance asked for.

One control plane (``Harness``) serves every example of a run: starting one costs
about 0.3 s and stopping one about a second, while returning it to its initial state
(``Harness.reset``: replug, restart, delete everything, archive, purge, restart the
computes so that their trackers reload in address order) costs about a second. The
reset checks that state: every device back, available and counted free in the pools.
A device still held then has leaked.

``tests/functional/test_pci_state_machine.py`` runs a few examples in ``make test``;
``python -m tests.soak`` (``make soak``) runs many and prints what it did.
"""

import collections
import contextlib
import dataclasses
import threading

import sqlalchemy as sa
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import service as conductor_service
from pcisim.db import archive, engine, models
from pcisim.objects.instance import Instance
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import config_overrides
from tests.functional import flows

CONF = pcisim_conf.CONF

# ------------------------------------------------------------------ the cloud

INVENTORIES = {
    "compute-1": ("node-1", "node-1=pfs=1,vfs_per_pf=2,gpus=2"),
    "compute-2": ("node-2", "node-2=pfs=2,vfs_per_pf=2,gpus=1"),
}
HOSTS = tuple(sorted(INVENTORIES))
NODES = {host: node for host, (node, _) in INVENTORIES.items()}
SPECS = ['{"vendor_id": "8086"}', '{"vendor_id": "10de"}']
ALIASES = [
    '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
    '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
    '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
]
# What each alias is given: (vendor_id, product_id, dev_type).
KINDS = {
    "gpu": ("10de", "1eb8", "type-PCI"),
    "vf": ("8086", "1520", "type-VF"),
    "pf": ("8086", "1521", "type-PF"),
}
# NOTE: feasible on some node of an empty cloud; "pf:1,vf:2" only on node-2, whose
# VFs of its second PF remain when the first PF is taken.
FEASIBLE = ("gpu:1", "gpu:2", "vf:1", "vf:2", "pf:1", "gpu:1,vf:1", "pf:1,vf:1", "pf:1,vf:2")
# NOTE: "pf:2,vf:1" fits node-2's pools counted apart, but not its shared PF/VF
# counters: the scheduler refuses it (in the legacy mode, the compute's claim does).
IMPOSSIBLE = ("gpu:3", "pf:2,vf:1")
HELD = flows.HELD
FOLLOWING = ("available", "unclaimable", "unavailable")  # a PF that follows its VFs

ARCHIVE = "archive"
CRASH = "crash"
BOOT_FAULTS = (
    None,
    (ARCHIVE, faults.BETWEEN_CLAIM_AND_ALLOCATE),
    (ARCHIVE, faults.BEFORE_TRACKER_SAVE),
    (ARCHIVE, faults.AFTER_TRACKER_SAVE),
    (CRASH, faults.BETWEEN_CLAIM_AND_ALLOCATE),
)
DELETE_FAULTS = (
    None,
    (ARCHIVE, faults.AFTER_SOFT_DELETE),
    (ARCHIVE, faults.BEFORE_TRACKER_SAVE),
    (ARCHIVE, faults.AFTER_TRACKER_SAVE),
    (CRASH, faults.AFTER_SOFT_DELETE),
)
PERIODIC_FAULTS = (
    None,
    (ARCHIVE, faults.BEFORE_TRACKER_SAVE),
    (ARCHIVE, faults.AFTER_TRACKER_SAVE),
)
SETTLE_SECONDS = 10.0
# NOTE: stopping a service takes up to a second (its RPC server's poll), every other
# step milliseconds: a budget per example keeps examples about as cheap as each other.
MAX_STOPS = 3
# NOTE: the cloud has a dozen devices; past this many instances a boot only adds an
# ERROR, and the steps are better spent deleting, restarting and unplugging.
MAX_INSTANCES = 8


def parse(request):
    """``"gpu:1,vf:2"`` -> ``[("gpu", 1), ("vf", 2)]``."""
    return [(name, int(count)) for name, count in (item.split(":") for item in request.split(","))]


def kind_of(device):
    """The alias a device (a row, or a PciDevice) serves, or None."""
    if not isinstance(device, dict):
        device = {name: getattr(device, name) for name in ("vendor_id", "product_id", "dev_type")}
    key = (device["vendor_id"], device["product_id"], device["dev_type"])
    return next((name for name, kind in KINDS.items() if kind == key), None)


class SimulatedCrash(Exception):
    """A compute dying at an injection point."""


# ----------------------------------------------------------------- the figures


@dataclasses.dataclass
class Stats:
    """What the machine did, over every example of a process (``make soak`` prints it)."""

    rules: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    faults: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    violations: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    leaked: set = dataclasses.field(default_factory=set)  # (host, address, instance_uuid)
    examples: int = 0
    resets: int = 0
    rebuilds: int = 0


STATS = Stats()


# ------------------------------------------------------------ reading the DB

NODES_TABLE = models.ComputeNode.__table__
INSTANCES = models.Instance.__table__
FAULTS = models.InstanceFault.__table__


def _rows(query):
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return [dict(row._mapping) for row in connection.execute(query)]


def compute_nodes():
    """Live compute node rows by id."""
    rows = _rows(sa.select(NODES_TABLE).where(NODES_TABLE.c.deleted == 0))
    return {row["id"]: row for row in rows}


def live_instances():
    """Live (not soft-deleted) instance rows by uuid."""
    rows = _rows(sa.select(INSTANCES).where(INSTANCES.c.deleted == 0))
    return {row["uuid"]: row for row in rows}


def faulted(uuids):
    """The uuids among ``uuids`` with at least one fault."""
    if not uuids:
        return set()
    query = sa.select(FAULTS.c.instance_uuid).where(FAULTS.c.instance_uuid.in_(list(uuids)))
    return {row["instance_uuid"] for row in _rows(query)}


def device_rows_by_node():
    """{(host, node): [live device rows]}."""
    nodes = compute_nodes()
    by_node = {(n["host"], n["hypervisor_hostname"]): [] for n in nodes.values()}
    for row in flows.devices():
        node = nodes[row["compute_node_id"]]
        by_node[(node["host"], node["hypervisor_hostname"])].append(row)
    return by_node


def pool_counts(rows):
    """Counts of available devices by (vendor, product, NUMA node, type)."""
    return collections.Counter(
        (r["vendor_id"], r["product_id"], r["numa_node"], r["dev_type"])
        for r in rows
        if r["status"] == "available"
    )


def published_counts(node_row):
    """The node's published pools as the same counts (empty pools left out)."""
    counts = collections.Counter()
    for pool in PciDevicePoolList.from_json(node_row["pci_stats"]):
        assert not pool.tags, f"no device_spec here tags devices: {pool.to_dict()}"
        counts[(pool.vendor_id, pool.product_id, pool.numa_node, pool.dev_type)] += pool.count
    return +counts


def _status_from_vfs(statuses):
    """A PF follows its VFs: unavailable while one is allocated, unclaimable while
    one is claimed, available otherwise (the design's rule, read off the rows)."""
    if "allocated" in statuses:
        return "unavailable"
    if "claimed" in statuses:
        return "unclaimable"
    return "available"


def pf_vf_problems(rows):
    """How live device rows of one node break the PF/VF rules of the design."""
    problems = []
    children = collections.defaultdict(list)
    for row in rows:
        if row["parent_addr"]:
            children[row["parent_addr"]].append(row)
    for pf in (row for row in rows if row["dev_type"] == "type-PF"):
        vfs = children[pf["address"]]
        statuses = sorted(vf["status"] for vf in vfs)
        if pf["status"] in HELD:
            # claiming a PF makes its VFs unclaimable, allocating it unavailable
            wanted = "unclaimable" if pf["status"] == "claimed" else "unavailable"
            if any(status != wanted for status in statuses):
                problems.append(f"PF {pf['address']} {pf['status']} with VFs {statuses}")
        elif pf["status"] in FOLLOWING:
            wanted = _status_from_vfs(statuses)
            if pf["status"] != wanted:
                problems.append(
                    f"PF {pf['address']} {pf['status']}, its VFs {statuses} say {wanted}"
                )
        else:
            problems.append(f"PF {pf['address']} is {pf['status']}")
        if any(vf["status"] in HELD for vf in vfs) and pf["status"] == "available":
            problems.append(f"PF {pf['address']} available with a VF busy: {statuses}")
    return problems


# -------------------------------------------------------------- the harness


def restart_conductor(plane):
    """Stop the plane's conductor and start a new one on the same topic, as an
    operator restarts the conductor process. Callers keep their transports."""
    conductor = plane.conductor
    conductor.service.stop()
    conductor.service = conductor_service.ConductorService(
        conductor.transport_url, topic=conductor.topic
    )
    conductor.manager = conductor.service.manager
    conductor.service.start()


class Harness:
    """One control plane on one SQLite file, shared by the examples of a run."""

    # NOTE: periodic tasks and heartbeats run only when a rule says so: the computes'
    # own timers would make examples depend on the clock, and a compute is down only
    # when a rule forces it down.
    OVERRIDES = {
        ("update_resources_interval", "compute"): 3600,
        ("report_interval", None): 3600,
        ("service_down_time", None): 7200,
    }

    def __init__(self, database):
        self.database = database  # a tests.backends.ScratchDatabase
        self.plane = None
        self.broken = False
        self.initial = None  # (device addresses by node, pools by node)
        self._reset_factory = None
        self._overrides = contextlib.ExitStack()

    def start(self):
        self._overrides.enter_context(config_overrides.overridden(CONF, self.OVERRIDES))
        self._build()
        return self

    def _build(self):
        self.database.empty()
        self._reset_factory = engine.context_manager.patch_factory(self.database.manager)
        drivers = {
            host: SimulatedDriver.from_config([spec]) for host, (_, spec) in INVENTORIES.items()
        }
        self.plane = testing.ControlPlane(
            drivers, DeviceSpecList.from_config(SPECS), parse_aliases(ALIASES)
        ).start()
        self.initial = self._state()
        self.broken = False

    def _state(self):
        by_node = device_rows_by_node()
        addresses = {node: sorted(r["address"] for r in rows) for node, rows in by_node.items()}
        pools = {node: pool_counts(rows) for node, rows in by_node.items()}
        return addresses, pools

    def stop(self):
        if self.plane is not None:
            self.plane.stop()
            self.plane = None
        if self._reset_factory is not None:
            self._reset_factory()
            self._reset_factory = None
        self._overrides.close()

    def rebuild(self):
        """A new control plane on an emptied database (after a failed example)."""
        STATS.rebuilds += 1
        with contextlib.suppress(Exception):
            self.plane.stop()
        self._reset_factory()
        self._build()

    def reset(self, machine):
        """Back to the initial state; returns what is not (leaked devices and more).

        Ends by restarting every compute: a tracker reloads its devices in address
        order, so each example starts with the same choices to make (a running one
        takes its devices in the order they were last freed)."""
        STATS.resets += 1
        plane = self.plane
        for host, devices in machine.unplugged.items():
            for device in sorted(devices.values(), key=lambda d: d["parent_addr"] is not None):
                plane.drivers[host].hot_plug(NODES[host], device)
        for host in sorted(machine.down):
            plane.restart_compute(host)
        plane.run_periodic()
        for uuid in sorted(live_instances()):
            plane.delete(uuid)
        plane.run_periodic()
        problems = self._differences()
        while plane.archive().total:
            pass
        with dbaccess.granted():
            archive.purge_shadow_tables(plane.context)
        self._restart_computes()
        return problems or self._differences()

    def _restart_computes(self):
        stoppers = [threading.Thread(target=self.plane.stop_compute, args=(h,)) for h in HOSTS]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        for host in HOSTS:
            self.plane.restart_compute(host)

    def _differences(self):
        problems = []
        addresses, pools = self._state()
        if addresses != self.initial[0]:
            problems.append(f"device rows {addresses}, at the start {self.initial[0]}")
        if pools != self.initial[1]:
            problems.append(f"available devices {pools}, at the start {self.initial[1]}")
        for (host, node), rows in device_rows_by_node().items():
            for row in rows:
                if row["status"] != "available" or row["instance_uuid"]:
                    STATS.leaked.add((host, row["address"], row["instance_uuid"]))
                    problems.append(f"{host}/{row['address']} left {row['status']}: {row}")
            if published_counts(compute_nodes_by_name()[(host, node)]) != pool_counts(rows):
                problems.append(f"{host}/{node} publishes pools unlike its rows")
            guests = self.plane.drivers[host].list_instances(node)
            if guests:
                problems.append(f"{host}/{node} still runs guests {sorted(guests)}")
        if live_instances():
            problems.append(f"instances left: {sorted(live_instances())}")
        return problems


def compute_nodes_by_name():
    return {(n["host"], n["hypervisor_hostname"]): n for n in compute_nodes().values()}


# -------------------------------------------------------------- the machine


@dataclasses.dataclass
class Booted:
    """What the model knows of an instance: what it asked for and where it landed."""

    uuid: str
    request: str
    state: str
    host: str | None
    node: str | None


def _counted(method):
    """Count a rule's runs, and remember that the example failed if it raises."""
    name = method.__name__

    def counted(self, *args, **kwargs):
        STATS.rules[name] += 1
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.failed = True
            raise

    counted.__name__ = name
    counted.__qualname__ = method.__qualname__
    counted.__doc__ = method.__doc__
    return counted


def _checked(method):
    """An invariant: count its violations, and remember that the example failed."""
    name = method.__name__

    def checked(self):
        try:
            method(self)
        except BaseException:
            self.failed = True
            STATS.violations[name] += 1
            raise

    checked.__name__ = name
    checked.__qualname__ = method.__qualname__
    checked.__doc__ = method.__doc__
    return checked


class PciMachine(RuleBasedStateMachine):
    """Boots, deletes, archives, periodic runs, hot (un)plugs and restarts, at random.

    ``harness`` (a started ``Harness``) is set by whoever runs the machine.
    """

    harness = None
    instances = Bundle("instances")
    stopped = Bundle("stopped")  # hosts stopped and forced down

    def __init__(self):
        super().__init__()
        if self.harness.broken:
            self.harness.rebuild()
        STATS.examples += 1
        self.plane = self.harness.plane
        self.failed = False
        self.live = {}  # uuid -> Booted
        self.pending = {host: set() for host in HOSTS}  # deleted, freed at the next periodic
        self.down = set()
        self.stops = 0  # services stopped (each stop takes up to a second)
        self.unplugged = {host: {} for host in HOSTS}  # address -> device entry
        self.unsynced = set()  # hosts whose hypervisor changed since their last sync

    # ------------------------------------------------------------ faults

    @contextlib.contextmanager
    def _fault(self, fault):
        """Inject ``fault`` (``(ARCHIVE or CRASH, point)``) once while the block runs;
        yields a list that records each time it fired."""
        fired = []
        if fault is None:
            yield fired
            return
        what, point = fault

        def action(**details):
            if fired:
                return
            fired.append(details)
            STATS.faults[f"{what}@{point}"] += 1
            if what == ARCHIVE:
                self.plane.archive()
            else:
                raise SimulatedCrash(f"crash at {point}")

        with faults.inject(point, action):
            yield fired

    # ------------------------------------------------------------ rules

    def _may_boot(self):
        return len(self.live) < MAX_INSTANCES

    @precondition(_may_boot)
    @rule(
        target=instances,
        request=st.sampled_from(FEASIBLE + IMPOSSIBLE),
        fault=st.sampled_from(BOOT_FAULTS),
    )
    @_counted
    def boot(self, request, fault):
        """Boot an instance; it must end ACTIVE when some up node had the devices free
        and nothing else can refuse it, and ERROR when no node could ever give them."""
        fits = self._fits_now(request)
        with self._fault(fault) as fired:
            uuid, state = self.plane.boot("vm", pci_requests=request)
        row = live_instances()[uuid]
        self.live[uuid] = Booted(uuid, request, state, row["host"], row["node"])
        self._settle()
        STATS.outcomes[f"boot {state}{self._why(uuid, request, fits, fault, fired)}"] += 1
        if request in IMPOSSIBLE or fired and fault[0] == CRASH:
            assert state == "error", f"{request} with {fault} ended {state}"
        elif fits:
            assert state == "active", f"{request} ended {state}, though {fits} had it free"
        return uuid

    @precondition(_may_boot)
    @rule(target=instances, requests=st.lists(st.sampled_from(FEASIBLE), min_size=2, max_size=4))
    @_counted
    def boot_concurrently(self, requests):
        """Start several builds at once: they race for the same pools (the scheduler
        reads published pools that the claims have not changed yet), and a claim
        refused sends its build to another node. Each ends ACTIVE or in ERROR."""
        created = [
            self.plane.api.create(self.plane.context, "vm", pci_requests=request)
            for request in requests
        ]
        states = [self.plane.wait_for(instance.uuid) for instance in created]
        rows = live_instances()
        for instance, request, state in zip(created, requests, states, strict=True):
            row = rows[instance.uuid]
            self.live[instance.uuid] = Booted(
                instance.uuid, request, state, row["host"], row["node"]
            )
            STATS.outcomes[f"concurrent boot {state}"] += 1
        self._settle()
        return multiple(*(instance.uuid for instance in created))

    @staticmethod
    def _why(uuid, request, fits, fault, fired):
        """Why a boot ended in ERROR, for the figures."""
        if request in IMPOSSIBLE:
            return " (impossible request)"
        if fired and fault[0] == CRASH:
            return " (crashed build)"
        rows = _rows(sa.select(FAULTS.c.message).where(FAULTS.c.instance_uuid == uuid))
        return f" ({rows[-1]['message'].split(':')[0]})" if rows else ""

    def _fits_now(self, request):
        """An up node that has the devices ``request`` needs free, or None.

        None too when the outcome is not simply the counts' (a hypervisor changed
        since its node last synced, or the claim's choice among free PFs decides)."""
        if self.unsynced - self.down:
            return None
        need = dict(parse(request))
        for (host, node), rows in device_rows_by_node().items():
            if host in self.down:
                continue
            free = [row for row in rows if row["status"] == "available"]
            have = collections.Counter(kind_of(row) for row in free)
            if "pf" in need and "vf" in need:
                pfs = [row["address"] for row in free if kind_of(row) == "pf"]
                if len(pfs) > 1:
                    continue
                # NOTE: the VFs of the PF the request takes are not free to it
                have["vf"] = sum(
                    1 for row in free if kind_of(row) == "vf" and row["parent_addr"] not in pfs
                )
            if all(have[name] >= count for name, count in need.items()):
                return node
        return None

    @rule(
        target=stopped,
        instance=consumes(instances),
        fault=st.sampled_from(DELETE_FAULTS),
        compute_down=st.booleans(),
    )
    @_counted
    def delete(self, instance, fault, compute_down):
        """Delete an instance on its compute, or, its compute stopped and forced down
        first (``compute_down``), locally: its devices then wait for the compute's
        return. A crash of the compute's delete half-way leaves them for its next
        periodic run. Returns the compute it stopped, if any."""
        booted = self.live.pop(instance)
        stopped = multiple()
        if compute_down and booted.host not in (None, *self.down) and self._may_stop():
            self._stop(booted.host)
            stopped = booted.host
        local = booted.host is None or booted.host in self.down
        with self._fault(fault) as fired:
            if local or fault == (CRASH, faults.AFTER_SOFT_DELETE):
                self.plane.api.delete(self.plane.context, self._instance(instance))
                self.plane.wait_for(instance, done=("deleted",))
                if not local:
                    testing.wait_until(lambda: fired, what="the delete to crash")
            else:
                self.plane.delete(instance)
        if booted.host is not None and (local or fired and fault[0] == CRASH):
            self.pending[booted.host].add(instance)
        self._settle()
        how = "crashed" if fired and fault[0] == CRASH else "local" if local else "on its compute"
        STATS.outcomes[f"delete of {booted.state} instance {how}"] += 1
        return stopped

    def _instance(self, uuid):
        return Instance.get_by_uuid(self.plane.context, uuid)

    def _settle(self):
        """Wait (a while) for the computes to finish what a flow left them to do.

        A flow's end as the API sees it is not the compute's: after a delete it saves
        the freed devices, then its node (usage and pools); a build that fails may
        record the ERROR before it releases what it held (its allocation, and devices
        only if something wrote its claim). Settled: every running compute holds
        devices and allocations only for its live instances (or for deleted ones its
        next periodic run frees), uses no more than they do, and publishes pools that
        count its available devices. Whatever is still not so is for the invariants
        to report.
        """
        with contextlib.suppress(TimeoutError):
            testing.wait_until(self._settled, SETTLE_SECONDS, "the computes to settle")

    def _settled(self):
        nodes, by_node = compute_nodes_by_name(), device_rows_by_node()
        allocations = flows.allocations_by_node()
        for host, node in NODES.items():
            if host in self.down:
                continue
            active = {u for u, b in self.live.items() if b.node == node and b.state == "active"}
            allowed = active | self.pending[host]
            rows, row = by_node[(host, node)], nodes[(host, node)]
            if any(r["instance_uuid"] not in allowed for r in rows if r["instance_uuid"]):
                return False
            if not allocations[row["id"]].keys() <= allowed:
                return False
            # NOTE: a delete that crashed leaves its usage until the next periodic run
            if row["vcpus_used"] > len(allowed):
                return False
            if published_counts(row) != pool_counts(rows):
                return False
        return True

    @rule(purge=st.booleans())
    @_counted
    def archive(self, purge):
        """archive_deleted_rows, as an operator runs it at any moment (and purge)."""
        self.plane.archive()
        if purge:
            with dbaccess.granted():
                archive.purge_shadow_tables(self.plane.context)

    @rule(host=st.sampled_from((None, *HOSTS)), fault=st.sampled_from(PERIODIC_FAULTS))
    @_counted
    def periodic(self, host, fault):
        """The periodic resource update of one running compute, or of all; afterwards
        nothing it ran on may still hold devices of a deleted instance."""
        with self._fault(fault):
            self.plane.run_periodic(host)
        for name in HOSTS:
            if host in (None, name) and name not in self.down:
                self.pending[name].clear()
                self.unsynced.discard(name)

    @rule(host=st.sampled_from(HOSTS), held=st.booleans(), index=st.integers(0, 15))
    @_counted
    def hot_unplug(self, host, held, index):
        """Unplug a device (one held by an instance, or a free one) from a hypervisor;
        a PF takes its VFs with it."""
        node = NODES[host]
        driver = self.plane.drivers[host]
        report = {d["address"]: d for d in driver.get_available_resource(node)["pci_devices"]}
        busy = {r["address"] for r in device_rows_by_node()[(host, node)] if r["status"] in HELD}
        candidates = sorted(a for a in report if (a in busy) == held) or sorted(report)
        if not candidates:
            return
        for address in driver.hot_unplug(node, candidates[index % len(candidates)]):
            self.unplugged[host][address] = report[address]
        self.unsynced.add(host)

    @precondition(lambda self: any(self.unplugged.values()))
    @rule(index=st.integers(0, 15))
    @_counted
    def hot_plug(self, index):
        """Plug back a device unplugged earlier (a VF only once its PF is back)."""
        candidates = sorted(
            (host, address)
            for host, devices in self.unplugged.items()
            for address, device in devices.items()
            if device["parent_addr"] not in devices
        )
        host, address = candidates[index % len(candidates)]
        self.plane.drivers[host].hot_plug(NODES[host], self.unplugged[host].pop(address))
        self.unsynced.add(host)

    def _may_stop(self):
        return self.stops < MAX_STOPS

    @precondition(_may_stop)
    @rule(target=stopped, host=st.sampled_from(HOSTS))
    @_counted
    def stop_compute(self, host):
        """Stop a compute and force it down: deletes of its instances become local."""
        if host in self.down:
            return multiple()
        self._stop(host)
        return host

    def _stop(self, host):
        self.stops += 1
        self.plane.stop_compute(host, forced_down=True)
        self.down.add(host)

    @rule(host=consumes(stopped))
    @_counted
    def start_compute(self, host):
        """Start a stopped compute: it syncs with its hypervisor and the database,
        freeing the devices of instances deleted while it was down."""
        self.plane.restart_compute(host)
        self._started(host)

    @precondition(_may_stop)
    @rule(host=st.sampled_from(HOSTS))
    @_counted
    def restart_compute(self, host):
        """Restart a running compute (as after a crash or an upgrade)."""
        if host in self.down:
            return
        self.stops += 1
        self.plane.restart_compute(host)
        self._started(host)

    def _started(self, host):
        self.down.discard(host)
        self.pending[host].clear()
        self.unsynced.discard(host)

    @precondition(_may_stop)
    @rule()
    @_counted
    def restart_conductor(self):
        """Stop the conductor and start a new one (computes keep running)."""
        self.stops += 1
        restart_conductor(self.plane)

    # ------------------------------------------------------- invariants

    @invariant()
    @_checked
    def no_device_row_lacks_identity(self):
        missing = flows.rows_missing_identity()
        assert missing == [], f"device rows lacking an identity field: {missing}"

    @invariant()
    @_checked
    def devices_are_held_by_live_instances_or_wait_for_a_periodic(self):
        pending = {uuid for uuids in self.pending.values() for uuid in uuids}
        leaked = []
        for (host, node), rows in device_rows_by_node().items():
            for row in rows:
                held, holder = row["status"] in HELD, row["instance_uuid"]
                assert held == (holder is not None), f"{host}/{node}: {row}"
                booted = self.live.get(holder)
                if holder is None or holder in pending and host in self._hosts_pending(holder):
                    continue
                if booted is None or booted.node != node or booted.state != "active":
                    leaked.append((host, row["address"], holder))
        STATS.leaked.update(leaked)
        assert leaked == [], f"devices held by no live instance of their node: {leaked}"

    def _hosts_pending(self, uuid):
        return {host for host, uuids in self.pending.items() if uuid in uuids}

    @invariant()
    @_checked
    def pf_and_vf_statuses_agree(self):
        problems = [p for rows in device_rows_by_node().values() for p in pf_vf_problems(rows)]
        assert problems == [], problems

    @invariant()
    @_checked
    def published_pools_count_the_available_devices(self):
        nodes = compute_nodes_by_name()
        for key, rows in device_rows_by_node().items():
            published, counted = published_counts(nodes[key]), pool_counts(rows)
            assert published == counted, f"{key} publishes {published}, its rows say {counted}"

    @invariant()
    @_checked
    def each_device_has_one_holder_and_instances_see_what_they_asked_for(self):
        rows = flows.devices()
        places = collections.Counter((r["compute_node_id"], r["address"]) for r in rows)
        twice = [place for place, n in places.items() if n > 1]
        assert twice == [], f"(node, address) with two live rows: {twice}"
        held_by = collections.defaultdict(set)
        for row in rows:
            if row["instance_uuid"]:
                held_by[row["instance_uuid"]].add(row["address"])
        for uuid, booted in self.live.items():
            if booted.state != "active":
                assert not held_by.get(uuid), f"{uuid} in {booted.state} holds devices"
                continue
            view = Instance.get_by_uuid(
                self.plane.context, uuid, expected_attrs=["pci_devices", "pci_requests"]
            )
            devices = list(view.pci_devices)
            seen = {d.address for d in devices}
            assert seen == held_by[uuid], f"{uuid} sees {seen}, the rows {held_by[uuid]}"
            assert all(d.status == "allocated" for d in devices), devices
            asked = {r.request_id: (r.alias_name, r.count) for r in view.pci_requests.requests}
            given = collections.defaultdict(list)
            for device in devices:
                given[device.request_id].append(kind_of(device))
            got = {rid: (kinds[0], len(kinds)) for rid, kinds in given.items()}
            assert got == asked, f"{uuid} asked for {asked} and got {dict(given)}"
            assert all(len(set(kinds)) == 1 for kinds in given.values()), dict(given)
            wanted = sorted(parse(booted.request))
            assert sorted(asked.values()) == wanted, f"{uuid} asked {booted.request}: {asked}"

    @invariant()
    @_checked
    def allocations_never_exceed_a_nodes_inventory_or_counters(self):
        for node_id, consumers in flows.allocations_by_node().items():
            node = compute_nodes()[node_id]
            used = collections.Counter()
            for resources in consumers.values():
                used.update(resources)
            for resource, column in capacity.NODE_TOTALS.items():
                assert used[resource] <= node[column], (node["host"], resource, used[resource])
            inventory = PciDevicePoolList.from_json(node["pci_inventory"]).objects
            by_name, sizes = capacity.draws(inventory)
            totals = {capacity.resource_name(pool): pool.count for pool in inventory}
            pci = {name: n for name, n in used.items() if name.startswith(capacity.PCI_PREFIX)}
            over = {name: n for name, n in pci.items() if n > totals.get(name, 0)}
            assert over == {}, f"{node['host']} allocates {over} of {totals}"
            overdrawn = {
                c: n for c, n in capacity.counters_left(by_name, sizes, pci).items() if n < 0
            }
            assert overdrawn == {}, f"{node['host']} overdraws counters {overdrawn}"

    @invariant()
    @_checked
    def allocations_belong_to_the_active_instances_of_their_node(self):
        """Every active instance has an allocation on its node; a deleted one keeps its
        allocation only until its compute frees its devices (it is pending till then),
        and no other instance has one."""
        node_ids = {row["hypervisor_hostname"]: i for i, row in compute_nodes().items()}
        active = {
            (node_ids[booted.node], uuid)
            for uuid, booted in self.live.items()
            if booted.state == "active"
        }
        pending = {
            (node_ids[NODES[host]], uuid) for host, uuids in self.pending.items() for uuid in uuids
        }
        held = {
            (node_id, uuid)
            for node_id, consumers in flows.allocations_by_node().items()
            for uuid in consumers
        }
        assert active <= held, f"active instances without an allocation: {sorted(active - held)}"
        ended = held - active - pending
        assert ended == set(), f"allocations of ended instances: {sorted(ended)}"

    @invariant()
    @_checked
    def devices_an_instance_holds_are_covered_by_its_allocation(self):
        allocated = {
            uuid: resources
            for consumers in flows.allocations_by_node().values()
            for uuid, resources in consumers.items()
        }
        held = collections.defaultdict(collections.Counter)
        for row in flows.devices():
            if row["instance_uuid"] is not None and row["status"] in HELD:
                held[row["instance_uuid"]][flows.resource_of(row)] += 1
        for uuid, counts in held.items():
            short = {
                name: n for name, n in counts.items() if n > allocated.get(uuid, {}).get(name, 0)
            }
            assert short == {}, f"{uuid} holds {dict(counts)}, allocated {allocated.get(uuid)}"

    @invariant()
    @_checked
    def instances_are_active_or_in_error_with_a_fault(self):
        rows = live_instances()
        assert set(rows) == set(self.live), f"live rows {set(rows)}, model {set(self.live)}"
        for uuid, row in rows.items():
            states = (row["vm_state"], row["task_state"])
            assert states in (("active", None), ("error", None)), f"{uuid} is {states}"
            assert row["vm_state"] == self.live[uuid].state, f"{uuid} was {self.live[uuid]}"
        errors = {uuid for uuid, row in rows.items() if row["vm_state"] == "error"}
        assert faulted(errors) == errors, f"ERROR without a fault: {errors - faulted(errors)}"

    @invariant()
    @_checked
    def hypervisors_run_the_guests_of_live_instances(self):
        for host, node in NODES.items():
            guests = self.plane.drivers[host].list_instances(node)
            active = {u for u, b in self.live.items() if b.node == node and b.state == "active"}
            assert active <= guests <= active | self.pending[host], (host, guests)

    @invariant()
    @_checked
    def synced_nodes_have_a_row_for_each_reported_device(self):
        by_node = device_rows_by_node()
        for host, node in NODES.items():
            if host in self.down or host in self.unsynced:
                continue
            report = self.plane.drivers[host].get_available_resource(node)["pci_devices"]
            reported = {d["address"] for d in report}
            rows = {r["address"]: r for r in by_node[(host, node)]}
            assert reported <= set(rows), (host, sorted(reported - set(rows)))
            for address in set(rows) - reported:
                # NOTE: kept until freed: held, a PF whose VF is held, or a VF whose
                # PF is (a guest given a PF has its VFs too)
                row = rows[address]
                relatives = [r for r in rows.values() if r["parent_addr"] == address]
                relatives += [rows[row["parent_addr"]]] if row["parent_addr"] in rows else []
                busy = row["status"] in HELD or any(r["status"] in HELD for r in relatives)
                assert busy, f"{host}/{address} is gone from the hypervisor but {row}"

    # -------------------------------------------------------- teardown

    def teardown(self):
        """Put the shared control plane back as it was: that every device comes back
        free is itself checked (a failed example only rebuilds it)."""
        try:
            problems = self.harness.reset(self)
        except Exception:
            self.harness.broken = True
            if self.failed:
                return
            raise
        if problems:
            self.harness.broken = True
            STATS.violations["reset_leaves_the_initial_state"] += 1
            if not self.failed:
                raise AssertionError("after deleting everything: " + "; ".join(problems))
