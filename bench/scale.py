"""The control plane at scale: 10, 100 and 1,000 simulated compute nodes.

Each size runs in a subprocess of its own, so that its memory is its own: the
all-in-one control plane (conductor, compute API and compute services in process, on
``kombu+memory:////`` and a SQLite file), with the nodes (each 2 PFs x 8 VFs) shared
out among 4 compute hosts that start together. Through the conductor path (compute
API -> conductor ``schedule_and_build_instances`` -> compute) it boots and deletes
1,000 servers that each ask for one VF, in waves of 100: a wave's requests are issued
together by 16 API threads, each with a request context of its own, then awaited. A
wave fills at most 62% of the 160 VFs of the 10-node run, so every server has room.

Each size runs twice, in processes of their own: with ``[scheduler] claim_mode =
allocations`` (the scheduler claims capacity with a compare-and-swap on the node's
generation) and with ``legacy`` (it chooses from the pools the computes published and
the compute's claim decides), the reference; tables print allocations/legacy ratios.

Measured per size and mode:
  startup     compute services started, every node registered and every service up
  memory      RSS growth from before the drivers were made to after startup, / nodes
              (the conductor's side included: rows, SQLite page caches); "marginal"
              is the growth beyond the smallest size, / the nodes added
  quiet       one scheduling decision with nothing else running (median of 30, wall
              and the thread's CPU): ``claim_destination`` with its allocation written
              (allocations) or ``select_destination``, which writes nothing (legacy)
  scheduling  the conductor's ``ComputeTaskManager._select`` during the boots, timed by
              a wrapper set in this process only: the choice, the allocation and the
              instance's row (wall and the thread's CPU, median and p95)
  active      POST-to-ACTIVE per server (p50, p95): from the API thread's request to
              the ``updated_at`` written with ``active`` (one process, one clock)
  boots       servers/second, from a wave's first request to its last ACTIVE; CPU per
              boot is the process's CPU (all threads) over the boot waves / servers
  CPU parts   where a boot's (and a delete's) CPU goes: the thread CPU of each RPC
              message's handling (taken off its queue, rebuilt, run, answered) and of
              each API request, by name; the bench's own thread; the rest by difference
  deletes     servers/second, from a wave's first delete to its last device freed
  resched     ``reschedule`` messages: claims that failed on the compute
  conflicts   generation swaps the scheduler lost and chose again after, per request
  messages    RPC messages of a boot's flow (and of a delete's) from the trace records
              of its request id, counted in memory; the HTTP request is not among them
              (the docs' traces show 4 and 7 with it). A delete reads the instance by
              uuid first, as the HTTP API does.

Then, at the largest size in allocations mode, ``[filter_scheduler] host_subset_size``
1, 3 and 32 in one process (fewer servers each): conflicts per request, scheduling
cost and boots/s, since concurrent requests that choose among the same few best nodes
collide on their generations. And ``[scheduler] view_max_age`` 0 (every choice reads
the view) and the default, alternating twice in one process: view reads and conflicts
per request, scheduling cost, since a view kept that long may miss others' changes.

Goals (issue 7): scheduling cost per request grows at most linearly with the nodes;
memory per simulated node < 2 MiB. Issue 13: no reschedule and no ERROR while capacity
remains; scheduling under 2 ms of CPU a request at 1,000 nodes; CPU per boot <= 10 ms;
messages per boot and per delete counted.

    python -m bench.scale [--quick]
"""

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before oslo.messaging loads

# isort: split
import argparse
import collections
import concurrent.futures
import contextlib
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import sqlalchemy as sa
from oslo_messaging.rpc import server as rpc_server
from oslo_utils import timeutils

from bench import harness
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import dbaccess, testing, trace
from pcisim import service as pcisim_service
from pcisim.compute import api as compute_api
from pcisim.compute import service as compute_service
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import compute_task, scheduler
from pcisim.db import allocations as db_allocations
from pcisim.db import engine, migration, models
from pcisim.objects import base as objects_base
from pcisim.objects.instance import Instance, InstanceList
from pcisim.objects.service import ServiceList
from pcisim.pci import request as pci_request
from pcisim.pci.devspec import DeviceSpecList

SIZES, QUICK_SIZES = (10, 100, 1000), (10, 30)
SERVERS, QUICK_SERVERS = 1000, 32
MODES = ("allocations", "legacy")
SUBSETS = ("filter_scheduler", "host_subset_size", (1, 3, 32))
# alternating, so that both see the same minutes; None: the default
VIEW_MAX_AGES = ("scheduler", "view_max_age", (0.0, None, 0.0, None))
SUBSET_SERVERS, QUICK_SUBSET_SERVERS = 300, 32
HOSTS = 4
WAVE = 100
API_THREADS = 16
QUIET_CALLS = 30
NODE_SHAPE = "pfs=2,vfs_per_pf=8"
DEVICE_SPEC = ['{"vendor_id": "8086"}']
ALIASES = ['{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}']
MIB = 1024 * 1024
CONF = pcisim_conf.CONF
# NOTE: in-process connections warn that they have no host name or AMQP heartbeat, and
# 16 concurrent calls that their reply queues might leak.
QUIET_LOGGERS = ("kombu.connection", "oslo.messaging._drivers", "oslo_messaging._drivers")


# ---------------------------------------------------------- the control plane


def _drivers(nodes):
    """``HOSTS`` compute hosts sharing ``nodes`` nodes, each parsed from the short form."""
    values = {f"compute-{h}": [] for h in range(min(HOSTS, nodes))}
    for n in range(nodes):
        values[f"compute-{n % HOSTS}"].append(f"node-{n:04d}={NODE_SHAPE}")
    return {host: SimulatedDriver.from_config(inventory) for host, inventory in values.items()}


class ScalePlane(testing.ControlPlane):
    """`testing.ControlPlane` whose compute services start together, as separate
    processes would, and which is ready once the scheduler sees every one up; then it
    freezes its start-up heap, as a served process does once ready."""

    def start(self):
        drivers, self.drivers = self.drivers, {}
        super().start()
        self.drivers = drivers
        with concurrent.futures.ThreadPoolExecutor(len(drivers)) as pool:
            list(pool.map(self.start_compute, drivers))
        testing.wait_until(self._all_up, CONF.report_interval * 2, "every compute to be up")
        pcisim_service.freeze_startup_heap()
        return self

    def _all_up(self):
        """A compute heartbeats before it syncs its nodes and next one report interval
        after: a sync longer than the service down time leaves it down until then."""
        with dbaccess.granted():
            services = ServiceList.get_all_by_binary(self.context, compute_service.BINARY)
        return len(services) == len(self.drivers) and all(
            service.is_up(CONF.service_down_time) for service in services
        )


class SchedulerTimer:
    """Wall and CPU seconds of every ``ComputeTaskManager._select`` in this process:
    in either mode, the choice of a node and the write of the instance's row with it
    (and, in allocations mode, of its allocation).

    The endpoint looks the method up on its class at each call, so replacing the
    class attribute here instruments the conductor without changing it.
    """

    def __init__(self):
        self.wall, self.cpu = [], []
        self._lock = threading.Lock()
        self._original = None
        self._reads_before = {}  # the timed endpoints' Scheduler -> its view reads then

    def __enter__(self):
        self._original = original = compute_task.ComputeTaskManager._select

        def timed(*args, **kwargs):
            chooser = args[0].scheduler
            with self._lock:
                self._reads_before.setdefault(chooser, chooser.view.reads())
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:
                    self.wall.append(time.perf_counter() - wall)
                    self.cpu.append(time.thread_time() - cpu)

        compute_task.ComputeTaskManager._select = timed
        return self

    def __exit__(self, *exc_info):
        compute_task.ComputeTaskManager._select = self._original

    def view_reads(self):
        """Reads of the view the timed schedulers made since each was first timed."""
        return sum(chooser.view.reads() - n for chooser, n in self._reads_before.items())


class HandlerCPU:
    """Thread CPU seconds spent handling each RPC message in this process, by message
    (taken off its queue whole: acknowledged, its arguments rebuilt, the method run,
    its answer serialized and sent), and in each API request (``API.create``,
    ``API.delete``: the client's side of its calls), summed by the ``phase`` set when
    each began: what a boot's and a delete's CPU is made of.

    oslo.messaging's RPC server and the compute API look these methods up on their
    classes at each call, so replacing the class attributes here instruments them.
    A call waiting on another's answer spends no CPU, so nothing is counted twice.
    """

    API_REQUESTS = ("create", "delete")

    def __init__(self):
        self.phase = None
        self.seconds = collections.defaultdict(collections.Counter)
        self._lock = threading.Lock()
        self._originals = {}

    def __enter__(self):
        self._wrap(rpc_server.RPCServer, "_process_incoming", lambda _, incoming: _named(incoming))
        for name in self.API_REQUESTS:
            self._wrap(compute_api.API, name, lambda *_, name=name: f"API.{name} (API thread)")
        return self

    def __exit__(self, *exc_info):
        for (cls, name), original in self._originals.items():
            setattr(cls, name, original)

    def _wrap(self, cls, name, key):
        self._originals[cls, name] = original = getattr(cls, name)

        def timed(*args, **kwargs):
            phase, cpu = self.phase, time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds[phase][key(*args)] += time.thread_time() - cpu

        setattr(cls, name, timed)


OBJECT_NAME = f"{objects_base.PcisimObject.OBJ_SERIAL_NAMESPACE}.name"


def _named(incoming):
    """A message's name as the tables give it: its method, an object call's object and
    method."""
    message = incoming[0].message
    args = message.get("args", {})
    if message.get("method") == "object_action":
        return f"{args['objinst'][OBJECT_NAME]}.{args['objmethod']}"
    if message.get("method") == "object_class_action_versions":
        return f"{args['objname']}.{args['objmethod']}"
    return message.get("method")


class MessageCounter:
    """A trace recorder (``trace.start_recorder``) that counts, in memory, each flow's
    messages by request id and name (an object call by its object and method)."""

    default_actor = "bench"

    def __init__(self):
        self._flows = collections.defaultdict(collections.Counter)
        self._lock = threading.Lock()

    def write(self, record):
        name = record["method"]
        if "object" in record:
            name = f"{record['object']}.{record['object_method']}"
        with self._lock:
            self._flows[record["request_id"]][name] += 1

    def close(self):
        pass

    def per_flow(self, request_ids):
        """{name: messages per flow} over the flows of ``request_ids``."""
        total = collections.Counter()
        for request_id in request_ids:
            total.update(self._flows.get(request_id, {}))
        return {name: count / len(request_ids) for name, count in sorted(total.items())}


def _database(directory, mode):
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    pcisim_conf.parse_args([], default_config_files=[])
    CONF.set_override("claim_mode", mode, group="scheduler")
    url = f"sqlite:///{os.path.join(directory, 'scale.sqlite')}"
    CONF.set_override("connection", url, group="database")
    engine.configure()
    migration.db_sync()


# ------------------------------------------------------------- measurements


def _rss():
    """This process's resident set size in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _query(statement):
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return connection.execute(statement).all()


def _instance_states():
    """vm_state -> number of live instances."""
    instance = models.Instance
    statement = (
        sa.select(instance.vm_state, sa.func.count())
        .where(instance.deleted == 0)
        .group_by(instance.vm_state)
    )
    return dict(_query(statement))


def _active_at():
    """uuid -> ``updated_at`` of the live ACTIVE instances (the save that made them so)."""
    instance = models.Instance
    statement = sa.select(instance.uuid, instance.updated_at).where(
        instance.deleted == 0, instance.vm_state == "active"
    )
    return dict(_query(statement))


def _held_devices():
    device = models.PciDevice
    statement = sa.select(sa.func.count()).where(
        device.deleted == 0, device.instance_uuid.is_not(None)
    )
    return _query(statement)[0][0]


def _wait(done, what, timeout):
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _quiet_scheduling(plane, aliases, mode):
    """Median wall and CPU ms of one scheduling decision with nothing else running:
    ``claim_destination``, its allocation written (and released after, untimed), or
    the legacy ``select_destination``."""
    wall, cpu, consumers = [], [], []
    chooser = scheduler.Scheduler()
    with dbaccess.granted():
        for _ in range(QUIET_CALLS):
            instance = _one_vf_instance(plane.context, aliases)
            start, start_cpu = time.perf_counter(), time.thread_time()
            if mode == "legacy":
                scheduler.select_destination(plane.context, instance)
            else:
                chooser.claim_destination(plane.context, instance)
            cpu.append(time.thread_time() - start_cpu)
            wall.append(time.perf_counter() - start)
            consumers.append(instance.uuid)
        if mode != "legacy":
            for consumer in consumers:
                db_allocations.release(plane.context, consumer)
    return {"wall_ms": _milliseconds(wall)["median"], "cpu_ms": _milliseconds(cpu)["median"]}


def _one_vf_instance(context, aliases):
    instance_uuid = str(uuid.uuid4())
    requests = pci_request.build_instance_requests(context, instance_uuid, "vf:1", aliases)
    return Instance(
        context, uuid=instance_uuid, vcpus=1, memory_mb=512, root_gb=1, pci_requests=requests
    )


def _as_api(call, flows=None):
    """``call(context)`` as an API request: a context (and traced flow) of its own,
    whose request id is added to ``flows``."""
    context = pcisim_context.get_admin_context()
    if flows is not None:
        flows.append(context.request_id)
    with trace.acting_as(testing.API_ACTOR):
        return call(context)


def _boot_wave(plane, pool, first, count, timeout, flows):
    """Boot ``count`` servers at once; the vm_states they ended in, and the seconds
    from each ACTIVE server's request to the ``updated_at`` written with ``active``."""

    def boot(n):
        sent = timeutils.utcnow()
        created = _as_api(lambda c: plane.api.create(c, f"scale-{n}", pci_requests="vf:1"), flows)
        return created.uuid, sent

    sent = dict(pool.map(boot, range(first, first + count)))
    _wait(lambda: not _instance_states().get("building"), "the wave to build", timeout)
    active_at = _active_at()
    latencies = [(active_at[u] - t).total_seconds() for u, t in sent.items() if u in active_at]
    return _instance_states(), latencies


def _delete_wave(plane, pool, timeout, flows):
    """Delete every server at once, each read by its uuid first as the HTTP API does;
    wait until they are gone and their devices free."""
    uuids = [instance.uuid for instance in _as_api(InstanceList.get_all)]

    def delete(instance_uuid):
        _as_api(lambda c: plane.api.delete(c, Instance.get_by_uuid(c, instance_uuid)), flows)

    list(pool.map(delete, uuids))
    _wait(
        lambda: not _instance_states() and not _held_devices(),
        "the wave to be deleted and its devices freed",
        timeout,
    )


def _boot_and_delete(plane, nodes, servers, timeout, handlers):
    """Boot and delete ``servers`` servers in waves, telling ``handlers`` (a
    ``HandlerCPU``) which phase runs: seconds and CPU seconds spent (the process's
    and this thread's, which only waits and polls), servers in ERROR, POST-to-ACTIVE
    seconds, and the request ids of the boots' and deletes' flows."""
    totals = {"boot_s": 0.0, "boot_cpu_s": 0.0, "boot_polling_s": 0.0}
    totals.update(delete_s=0.0, delete_cpu_s=0.0, delete_polling_s=0.0)
    totals.update(errors=0, boot_flows=[], delete_flows=[], active_s=[])
    with concurrent.futures.ThreadPoolExecutor(API_THREADS) as pool:
        for first in range(0, servers, WAVE):
            count = min(WAVE, servers - first)
            harness.progress(f"scale: {nodes} nodes: booting {first + count}/{servers}")
            with _phase("boot", handlers, totals):
                states, latencies = _boot_wave(
                    plane, pool, first, count, timeout, totals["boot_flows"]
                )
            totals["active_s"] += latencies
            totals["errors"] += states.get("error", 0)
            harness.progress(f"scale: {nodes} nodes: deleting {first + count}/{servers}")
            with _phase("delete", handlers, totals):
                _delete_wave(plane, pool, timeout, totals["delete_flows"])
    return totals


@contextlib.contextmanager
def _phase(name, handlers, totals):
    """The block as phase ``name``: its seconds, the process's CPU seconds and this
    thread's added to ``totals``."""
    handlers.phase = name
    start, cpu, polling = time.perf_counter(), time.process_time(), time.thread_time()
    try:
        yield
    finally:
        handlers.phase = None
        totals[f"{name}_s"] += time.perf_counter() - start
        totals[f"{name}_cpu_s"] += time.process_time() - cpu
        totals[f"{name}_polling_s"] += time.thread_time() - polling


def _measured_run(plane, nodes, servers, setting=None):
    """Boot and delete ``servers`` servers (with ``setting``, (group, option, value),
    set when given; value None: the default) with the scheduler timed and every
    message counted; the figures as a dict."""
    if setting is not None:
        group, name, value = setting
        if value is None:
            CONF.clear_override(name, group=group)
        else:
            CONF.set_override(name, value, group=group)
    counter, conflicts = MessageCounter(), scheduler.generation_conflicts()
    trace.start_recorder(counter)
    try:
        with SchedulerTimer() as timer, HandlerCPU() as handlers:
            totals = _boot_and_delete(plane, nodes, servers, 120 + nodes * 0.5, handlers)
    finally:
        trace.stop()
    boot, delete = counter.per_flow(totals["boot_flows"]), counter.per_flow(totals["delete_flows"])
    return {
        "servers": servers,
        "host_subset_size": CONF.filter_scheduler.host_subset_size,
        "view_max_age": CONF.scheduler.view_max_age,
        "view_reads_per_request": timer.view_reads() / len(timer.wall),
        "boot_s": totals["boot_s"],
        "delete_s": totals["delete_s"],
        "errors": totals["errors"],
        "boots_per_s": servers / totals["boot_s"],
        "deletes_per_s": servers / totals["delete_s"],
        "cpu_ms_per_boot": totals["boot_cpu_s"] / servers * 1e3,
        "active_ms": _milliseconds(totals["active_s"]),
        "cpu_ms_per_delete": totals["delete_cpu_s"] / servers * 1e3,
        "boot_cpu_ms": _cpu_parts(handlers.seconds["boot"], totals, "boot", servers),
        "delete_cpu_ms": _cpu_parts(handlers.seconds["delete"], totals, "delete", servers),
        "schedules": len(timer.wall),
        "schedule_ms": _milliseconds(timer.wall),
        "schedule_cpu_ms": _milliseconds(timer.cpu),
        "generation_conflicts": scheduler.generation_conflicts() - conflicts,
        "conflicts_per_request": (scheduler.generation_conflicts() - conflicts) / len(timer.wall),
        "reschedules": round(boot.get("reschedule", 0) * servers),
        "messages_per_boot": sum(boot.values()),
        "messages_per_delete": sum(delete.values()),
        "boot_messages": boot,
        "delete_messages": delete,
    }


def _cpu_parts(handled, totals, phase, servers):
    """{part: ms of CPU a server} of a phase: each message's handling and API request
    (``HandlerCPU``), the bench's own thread, and the rest of the process's CPU."""
    parts = {name: seconds / servers * 1e3 for name, seconds in handled.items()}
    parts[POLLING] = totals[f"{phase}_polling_s"] / servers * 1e3
    parts[REST] = totals[f"{phase}_cpu_s"] / servers * 1e3 - sum(parts.values())
    return parts


POLLING = "the bench's thread (waits, polls the database at 20 Hz)"
REST = "the rest: listener, reply and periodic threads, executors between messages"


def run_size(nodes, mode, servers, sweep=None):
    """Start ``nodes`` nodes in claim mode ``mode``, then boot and delete ``servers``
    servers, once, or once per value of a ``sweep`` ((group, option, values)); the
    figures."""
    directory = tempfile.TemporaryDirectory(prefix="pcisim-scale-")
    _database(directory.name, mode)
    specs = DeviceSpecList.from_config(DEVICE_SPEC)
    aliases = pci_request.parse_aliases(ALIASES)
    result = {"nodes": nodes, "mode": mode, "hosts": min(HOSTS, nodes)}
    harness.progress(f"scale: {nodes} nodes ({mode}): starting")
    gc.collect()
    rss_before, start = _rss(), time.perf_counter()
    plane = ScalePlane(_drivers(nodes), specs, aliases).start()
    try:
        result["startup_s"] = time.perf_counter() - start
        gc.collect()
        result["rss_growth_mib"] = (_rss() - rss_before) / MIB
        result["mib_per_node"] = result["rss_growth_mib"] / nodes
        result["quiet"] = _quiet_scheduling(plane, aliases, mode)
        if sweep:
            group, name, values = sweep
            result["runs"] = [
                _measured_run(plane, nodes, servers, (group, name, value)) for value in values
            ]
        else:
            result.update(_measured_run(plane, nodes, servers))
    finally:
        harness.progress(f"scale: {nodes} nodes ({mode}): stopping")
        plane.stop()
        with dbaccess.granted():
            engine.get_engine().dispose()
        directory.cleanup()
    return result


def _milliseconds(seconds):
    summary = {key: value * 1e3 for key, value in harness.summarize(seconds).items()}
    summary["mean"] = sum(seconds) / len(seconds) * 1e3
    summary["p95"] = sorted(seconds)[int(len(seconds) * 0.95)] * 1e3
    return summary


# ---------------------------------------------------------------- every size


def measure(sizes, servers, subset_servers):
    """Each size in each mode in a subprocess of its own (the modes alternating, so
    that both see the same load), then the ``host_subset_size`` and ``view_max_age``
    sweeps at the largest size; ([result], subset sweep, view sweep)."""
    results = [_subprocess(nodes, mode, servers) for nodes in sizes for mode in MODES]
    subsets = _subprocess(sizes[-1], "allocations", subset_servers, SUBSETS)
    views = _subprocess(sizes[-1], "allocations", subset_servers, VIEW_MAX_AGES)
    harness.done_progress()
    return results, subsets, views


def _subprocess(nodes, mode, servers, sweep=None):
    command = [sys.executable, "-m", "bench.scale", "--one", str(nodes), mode, str(servers)]
    if sweep:
        command += ["--sweep", json.dumps(sweep)]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(output.splitlines()[-1])


def report(results, sweep, views):
    """Print every table; the result to record."""
    modes = {mode: [r for r in results if r["mode"] == mode] for mode in MODES}
    _marginal_memory(modes["allocations"])
    servers = results[0]["servers"]
    title = (
        f"{servers} servers of one VF, in waves of {min(WAVE, servers)} from {API_THREADS} "
        f"threads; nodes of {NODE_SHAPE} on {HOSTS} compute hosts; kombu+memory, SQLite file"
    )
    _outcome_table(title, results)
    _cost_table(results)
    _ratio_table(modes)
    _decision_table(modes)
    _growth_table(modes["allocations"])
    _message_table(modes)
    _cpu_table(modes["allocations"], "boot")
    _cpu_table(modes["allocations"], "delete")
    _subset_table(sweep)
    _view_table(views)
    return {
        "sizes": results,
        "host_subset_size_sweep": sweep,
        "view_max_age_sweep": views,
        "wave": WAVE,
        "api_threads": API_THREADS,
        "hosts": HOSTS,
        "node_shape": NODE_SHAPE,
    }


def _marginal_memory(results):
    base = results[0]
    for result in results[1:]:
        added = result["nodes"] - base["nodes"]
        result["marginal_mib_per_node"] = (
            result["rss_growth_mib"] - base["rss_growth_mib"]
        ) / added


def _outcome_table(title, results):
    harness.print_table(
        f"Control plane at scale, both claim modes: {title}",
        ("nodes", "mode", "boots/s", "deletes/s", "resched", "errors", "conflicts/req")
        + ("msgs/boot", "msgs/delete", "startup s", "MiB/node"),
        [
            (
                r["nodes"],
                r["mode"],
                f"{r['boots_per_s']:.1f}",
                f"{r['deletes_per_s']:.1f}",
                r["reschedules"],
                r["errors"],
                "-" if r["mode"] == "legacy" else f"{r['conflicts_per_request']:.3f}",
                f"{r['messages_per_boot']:.2f}",
                f"{r['messages_per_delete']:.2f}",
                f"{r['startup_s']:.1f}",
                f"{r['mib_per_node']:.3f}",
            )
            for r in results
        ],
    )


def _cost_table(results):
    harness.print_table(
        "Costs in ms: scheduling per request during the boots (choice, allocation and "
        "instance row; wall and the thread's CPU), POST-to-ACTIVE per server, and the "
        "process's CPU per boot and delete",
        ("nodes", "mode", "sched", "p95", "sched CPU", "p95", "active p50", "p95")
        + ("CPU/boot", "CPU/delete"),
        [
            (
                r["nodes"],
                r["mode"],
                f"{r['schedule_ms']['median']:.1f}",
                f"{r['schedule_ms']['p95']:.0f}",
                f"{r['schedule_cpu_ms']['median']:.2f}",
                f"{r['schedule_cpu_ms']['p95']:.2f}",
                f"{r['active_ms']['median']:.0f}",
                f"{r['active_ms']['p95']:.0f}",
                f"{r['cpu_ms_per_boot']:.1f}",
                f"{r['cpu_ms_per_delete']:.1f}",
            )
            for r in results
        ],
    )


def _ratio_table(modes):
    def ratio(new, old, *keys):
        for key in keys:
            new, old = new[key], old[key]
        return harness.ratio(new, old)

    rows = []
    for new, old in zip(modes["allocations"], modes["legacy"], strict=True):
        rows.append(
            (
                new["nodes"],
                f"{new['reschedules']}/{old['reschedules']}",
                f"{new['errors']}/{old['errors']}",
                ratio(new, old, "boots_per_s"),
                ratio(new, old, "schedule_ms", "median"),
                ratio(new, old, "schedule_ms", "p95"),
                ratio(new, old, "schedule_cpu_ms", "median"),
                ratio(new, old, "schedule_cpu_ms", "p95"),
                ratio(new, old, "active_ms", "median"),
                ratio(new, old, "active_ms", "p95"),
                ratio(new, old, "cpu_ms_per_boot"),
                ratio(new, old, "messages_per_boot"),
                ratio(new, old, "messages_per_delete"),
            )
        )
    harness.print_table(
        "allocations / legacy (resched and errors: both counts)",
        ("nodes", "resched", "errors", "boots/s", "sched", "p95", "sched CPU", "p95")
        + ("active p50", "p95", "CPU/boot", "msgs/boot", "msgs/delete"),
        rows,
    )


def _decision_table(modes):
    new_base, old_base = modes["allocations"][0]["quiet"], modes["legacy"][0]["quiet"]
    rows = []
    for new, old in zip(modes["allocations"], modes["legacy"], strict=True):
        rows.append(
            (
                new["nodes"],
                f"{new['nodes'] / modes['allocations'][0]['nodes']:.0f}x",
                f"{new['quiet']['cpu_ms']:.2f}",
                f"{new['quiet']['wall_ms']:.2f}",
                f"{old['quiet']['cpu_ms']:.2f}",
                f"{old['quiet']['wall_ms']:.2f}",
                harness.ratio(new["quiet"]["cpu_ms"], old["quiet"]["cpu_ms"]),
                harness.ratio(new["quiet"]["cpu_ms"], new_base["cpu_ms"]),
                harness.ratio(old["quiet"]["cpu_ms"], old_base["cpu_ms"]),
            )
        )
    harness.print_table(
        f"One scheduling decision, nothing else running (ms, median of {QUIET_CALLS}): "
        "claim_destination with its allocation written, against the legacy "
        "select_destination (writes nothing); growth against the smallest size",
        ("nodes", "x nodes", "claim CPU", "wall", "select CPU", "wall", "claim/select")
        + ("claim growth", "select growth"),
        rows,
    )


def _growth_table(results):
    base = results[0]
    harness.print_table(
        f"Growth against {base['nodes']} nodes, allocations mode (linear = the nodes ratio; "
        f"marginal MiB/node: RSS growth beyond {base['nodes']} nodes / nodes added)",
        ("nodes", "x nodes", "startup", "boots/s", "deletes/s", "sched CPU", "CPU/boot")
        + ("MiB/node", "marginal MiB/node"),
        [
            (
                r["nodes"],
                f"{r['nodes'] / base['nodes']:.0f}x",
                harness.ratio(r["startup_s"], base["startup_s"]),
                harness.ratio(r["boots_per_s"], base["boots_per_s"]),
                harness.ratio(r["deletes_per_s"], base["deletes_per_s"]),
                harness.ratio(r["schedule_cpu_ms"]["median"], base["schedule_cpu_ms"]["median"]),
                harness.ratio(r["cpu_ms_per_boot"], base["cpu_ms_per_boot"]),
                harness.ratio(r["mib_per_node"], base["mib_per_node"]),
                f"{r['marginal_mib_per_node']:.3f}" if "marginal_mib_per_node" in r else "-",
            )
            for r in results
        ],
    )


def _message_table(modes):
    new, old = modes["allocations"][-1], modes["legacy"][-1]
    rows = []
    for flow in ("boot", "delete"):
        counts = (new[f"{flow}_messages"], old[f"{flow}_messages"])
        for name in sorted(set(counts[0]) | set(counts[1])):
            rows.append((flow, name, *(f"{c.get(name, 0):.2f}" for c in counts)))
    harness.print_table(
        f"RPC messages per flow at {new['nodes']} nodes, by message (the HTTP request not counted)",
        ("flow", "message", "allocations", "legacy"),
        rows,
    )


RUN_COLUMNS = ("sched", "p95", "sched CPU", "p95", "boots/s", "CPU/boot", "resched", "errors")


def _cpu_table(results, flow):
    """Where a boot's (or a delete's) CPU goes at each size: the parts of
    ``_cpu_parts``, the largest first; those under ``SMALL_PART_MS`` at every size
    summed as one."""
    parts = [r[f"{flow}_cpu_ms"] for r in results]
    names = sorted({name for p in parts for name in p}, key=lambda n: -parts[-1].get(n, 0))
    small = [n for n in names if all(p.get(n, 0) < SMALL_PART_MS for p in parts)]
    rows = [(n, *(f"{p.get(n, 0):.2f}" for p in parts)) for n in names if n not in small]
    if small:
        rows.append((f"{len(small)} other messages", *(_sum_of(p, small) for p in parts)))
    rows.append((f"CPU per {flow}", *(f"{sum(p.values()):.2f}" for p in parts)))
    harness.print_table(
        f"Where a {flow}'s CPU goes, allocations mode (ms a {flow}, thread CPU: each message "
        "handled whole, each API request, the rest by difference with the process's CPU)",
        ("part", *(f"{r['nodes']} nodes" for r in results)),
        rows,
    )


SMALL_PART_MS = 0.05


def _sum_of(parts, names):
    return f"{sum(parts.get(n, 0) for n in names):.2f}"


def _run_cells(r):
    """A sweep run's figures under ``RUN_COLUMNS``."""
    return (
        f"{r['schedule_ms']['median']:.1f}",
        f"{r['schedule_ms']['p95']:.0f}",
        f"{r['schedule_cpu_ms']['median']:.2f}",
        f"{r['schedule_cpu_ms']['p95']:.2f}",
        f"{r['boots_per_s']:.1f}",
        f"{r['cpu_ms_per_boot']:.1f}",
        r["reschedules"],
        r["errors"],
    )


def _subset_table(sweep):
    harness.print_table(
        f"[filter_scheduler] host_subset_size at {sweep['nodes']} nodes, allocations mode, "
        f"one process: {sweep['runs'][0]['servers']} servers each (scheduling in ms)",
        ("subset", "conflicts/req", "conflicts", *RUN_COLUMNS),
        [
            (
                r["host_subset_size"],
                f"{r['conflicts_per_request']:.3f}",
                r["generation_conflicts"],
                *_run_cells(r),
            )
            for r in sweep["runs"]
        ],
    )


def _view_table(sweep):
    harness.print_table(
        f"[scheduler] view_max_age at {sweep['nodes']} nodes, allocations mode, one process, "
        f"the settings alternating: {sweep['runs'][0]['servers']} servers each (scheduling "
        "in ms; view reads per request)",
        ("max age s", "reads/req", "conflicts/req", *RUN_COLUMNS),
        [
            (
                f"{r['view_max_age']:g}",
                f"{r['view_reads_per_request']:.3f}",
                f"{r['conflicts_per_request']:.3f}",
                *_run_cells(r),
            )
            for r in sweep["runs"]
        ],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="10 and 30 nodes, 32 servers (and 32 for each subset)"
    )
    parser.add_argument(
        "--one", nargs=3, metavar=("NODES", "MODE", "SERVERS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--sweep", type=json.loads, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        nodes, mode, servers = args.one
        print(json.dumps(run_size(int(nodes), mode, int(servers), args.sweep)))
        return
    if args.quick:
        results = measure(QUICK_SIZES, QUICK_SERVERS, QUICK_SUBSET_SERVERS)
    else:
        results = measure(SIZES, SERVERS, SUBSET_SERVERS)
    harness.record("scale-quick" if args.quick else "scale", report(*results))


if __name__ == "__main__":
    main()
