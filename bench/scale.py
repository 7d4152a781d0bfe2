"""The control plane at scale: 10, 100 and 1,000 simulated compute nodes.

Each size runs in a subprocess of its own, so that its memory is its own: the
all-in-one control plane (conductor, compute API and compute services in process, on
``kombu+memory:////`` and a SQLite file), with the nodes (each 2 PFs x 8 VFs) shared
out among 4 compute hosts that start together. Through the conductor path (compute
API -> conductor ``schedule_and_build_instances`` -> compute) it boots and deletes
1,000 servers that each ask for one VF, in waves of 100: a wave's requests are issued
together by 16 API threads, each with a request context of its own, then awaited. A
wave fills at most 62% of the 160 VFs of the 10-node run, so every server has room.

Measured per size:
  startup     compute services started, every node registered and every service up
  memory      RSS growth from before the drivers were made to after startup, / nodes
              (the conductor's side included: rows, SQLite page caches); "marginal"
              is the growth beyond the smallest size, / the nodes added
  scheduling  the conductor's ``select_destination``, timed by a wrapper set in this
              process only: per request during the boots (wall and the thread's CPU),
              and alone ("quiet", median of 20 with nothing else running)
  boots       servers/second, from a wave's first request to its last ACTIVE
  deletes     servers/second, from a wave's first delete to its last device freed
  resched     schedules beyond one per server: claims that failed on a stale choice

Goals (issue 7): scheduling cost per request grows at most linearly with the nodes;
memory per simulated node < 2 MiB.

    python -m bench.scale [--quick]
"""

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before oslo.messaging loads

# isort: split
import argparse
import concurrent.futures
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

from bench import harness
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import dbaccess, testing, trace
from pcisim.compute import service as compute_service
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import scheduler
from pcisim.db import engine, migration, models
from pcisim.objects.instance import Instance, InstanceList
from pcisim.objects.service import ServiceList
from pcisim.pci import request as pci_request
from pcisim.pci.devspec import DeviceSpecList

SIZES, QUICK_SIZES = (10, 100, 1000), (10, 30)
SERVERS, QUICK_SERVERS = 1000, 50
HOSTS = 4
WAVE = 100
API_THREADS = 16
QUIET_CALLS = 20
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
    processes would, and which is ready once the scheduler sees every one up."""

    def start(self):
        drivers, self.drivers = self.drivers, {}
        super().start()
        self.drivers = drivers
        with concurrent.futures.ThreadPoolExecutor(len(drivers)) as pool:
            list(pool.map(self.start_compute, drivers))
        testing.wait_until(self._all_up, CONF.report_interval * 2, "every compute to be up")
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
    """Wall and CPU seconds of every ``scheduler.select_destination`` in this process.

    ``compute_task`` looks the function up on the module at each call, so replacing
    the module attribute here instruments the conductor without changing it.
    """

    def __init__(self):
        self.wall, self.cpu = [], []
        self._lock = threading.Lock()
        self._original = None

    def __enter__(self):
        self._original = original = scheduler.select_destination

        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:
                    self.wall.append(time.perf_counter() - wall)
                    self.cpu.append(time.thread_time() - cpu)

        scheduler.select_destination = timed
        return self

    def __exit__(self, *exc_info):
        scheduler.select_destination = self._original


def _database(directory):
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    pcisim_conf.parse_args([], default_config_files=[])
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


def _quiet_scheduling(plane, aliases):
    """Median seconds of one ``select_destination`` with nothing else running."""
    instance_uuid = str(uuid.uuid4())
    requests = pci_request.build_instance_requests(plane.context, instance_uuid, "vf:1", aliases)
    instance = Instance(
        plane.context,
        uuid=instance_uuid,
        vcpus=1,
        memory_mb=512,
        root_gb=1,
        pci_requests=requests,
    )
    samples = []
    with dbaccess.granted():
        for _ in range(QUIET_CALLS):
            start = time.perf_counter()
            scheduler.select_destination(plane.context, instance)
            samples.append(time.perf_counter() - start)
    return harness.summarize(samples)["median"]


def _as_api(call):
    """``call(context)`` as an API request: a context (and traced flow) of its own."""
    with trace.acting_as(testing.API_ACTOR):
        return call(pcisim_context.get_admin_context())


def _boot_wave(plane, pool, first, count, timeout):
    """Boot ``count`` servers at once; the vm_states they ended in."""

    def boot(n):
        _as_api(lambda context: plane.api.create(context, f"scale-{n}", pci_requests="vf:1"))

    list(pool.map(boot, range(first, first + count)))
    _wait(lambda: not _instance_states().get("building"), "the wave to build", timeout)
    return _instance_states()


def _delete_wave(plane, pool, timeout):
    """Delete every server at once; wait until they are gone and their devices free."""
    instances = _as_api(InstanceList.get_all)

    def delete(instance):
        _as_api(lambda context: plane.api.delete(context, instance))

    list(pool.map(delete, instances))
    _wait(
        lambda: not _instance_states() and not _held_devices(),
        "the wave to be deleted and its devices freed",
        timeout,
    )


def _boot_and_delete(plane, nodes, servers, timeout):
    """Boot and delete ``servers`` servers in waves; seconds spent and servers in ERROR."""
    totals = {"boot_s": 0.0, "delete_s": 0.0, "errors": 0}
    with concurrent.futures.ThreadPoolExecutor(API_THREADS) as pool:
        for first in range(0, servers, WAVE):
            count = min(WAVE, servers - first)
            harness.progress(f"scale: {nodes} nodes: booting {first + count}/{servers}")
            start = time.perf_counter()
            totals["errors"] += _boot_wave(plane, pool, first, count, timeout).get("error", 0)
            totals["boot_s"] += time.perf_counter() - start
            harness.progress(f"scale: {nodes} nodes: deleting {first + count}/{servers}")
            start = time.perf_counter()
            _delete_wave(plane, pool, timeout)
            totals["delete_s"] += time.perf_counter() - start
    return totals


def run_size(nodes, servers):
    """Start ``nodes`` nodes, boot and delete ``servers`` servers; the figures as a dict."""
    directory = tempfile.TemporaryDirectory(prefix="pcisim-scale-")
    _database(directory.name)
    specs = DeviceSpecList.from_config(DEVICE_SPEC)
    aliases = pci_request.parse_aliases(ALIASES)
    result = {"nodes": nodes, "servers": servers, "hosts": min(HOSTS, nodes)}
    harness.progress(f"scale: {nodes} nodes: starting")
    gc.collect()
    rss_before, start = _rss(), time.perf_counter()
    plane = ScalePlane(_drivers(nodes), specs, aliases).start()
    try:
        result["startup_s"] = time.perf_counter() - start
        gc.collect()
        result["rss_growth_mib"] = (_rss() - rss_before) / MIB
        result["mib_per_node"] = result["rss_growth_mib"] / nodes
        result["quiet_schedule_ms"] = _quiet_scheduling(plane, aliases) * 1e3
        with SchedulerTimer() as timer:
            result.update(_boot_and_delete(plane, nodes, servers, timeout=120 + nodes * 0.5))
    finally:
        harness.progress(f"scale: {nodes} nodes: stopping")
        plane.stop()
        with dbaccess.granted():
            engine.get_engine().dispose()
        directory.cleanup()
    result.update(
        boots_per_s=servers / result["boot_s"],
        deletes_per_s=servers / result["delete_s"],
        schedules=len(timer.wall),
        schedule_ms=_milliseconds(timer.wall),
        schedule_cpu_ms=_milliseconds(timer.cpu),
    )
    return result


def _milliseconds(seconds):
    summary = {key: value * 1e3 for key, value in harness.summarize(seconds).items()}
    summary["mean"] = sum(seconds) / len(seconds) * 1e3
    summary["p95"] = sorted(seconds)[int(len(seconds) * 0.95)] * 1e3
    return summary


# ---------------------------------------------------------------- every size


def measure(sizes, servers):
    """Each size in a subprocess of its own; their results in order."""
    results = []
    for nodes in sizes:
        command = [sys.executable, "-m", "bench.scale", "--one", str(nodes), str(servers)]
        output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(output.splitlines()[-1]))
    harness.done_progress()
    return results


def report(results):
    base = results[0]
    for result in results[1:]:
        added = result["nodes"] - base["nodes"]
        result["marginal_mib_per_node"] = (
            result["rss_growth_mib"] - base["rss_growth_mib"]
        ) / added
    harness.print_table(
        f"Control plane at scale: {base['servers']} servers of one VF, in waves of {WAVE}; "
        f"nodes of {NODE_SHAPE} on {HOSTS} compute hosts; kombu+memory, SQLite file "
        "(scheduling: ms per request)",
        (
            "nodes",
            "startup s",
            "boots/s",
            "deletes/s",
            "sched ms",
            "p95",
            "sched CPU",
            "quiet",
            "resched",
            "errors",
            "MiB/node",
        ),
        [
            (
                r["nodes"],
                f"{r['startup_s']:.1f}",
                f"{r['boots_per_s']:.1f}",
                f"{r['deletes_per_s']:.1f}",
                f"{r['schedule_ms']['median']:.1f}",
                f"{r['schedule_ms']['p95']:.0f}",
                f"{r['schedule_cpu_ms']['median']:.2f}",
                f"{r['quiet_schedule_ms']:.2f}",
                r["schedules"] - r["servers"],
                r["errors"],
                f"{r['mib_per_node']:.3f}",
            )
            for r in results
        ],
    )
    harness.print_table(
        f"Growth against {base['nodes']} nodes (linear = the nodes ratio; marginal MiB/node: "
        f"RSS growth beyond {base['nodes']} nodes / nodes added)",
        (
            "nodes",
            "x nodes",
            "startup",
            "boots/s",
            "deletes/s",
            "sched CPU",
            "quiet sched",
            "MiB/node",
            "marginal MiB/node",
        ),
        [
            (
                r["nodes"],
                f"{r['nodes'] / base['nodes']:.0f}x",
                _ratio(r["startup_s"], base["startup_s"]),
                _ratio(r["boots_per_s"], base["boots_per_s"]),
                _ratio(r["deletes_per_s"], base["deletes_per_s"]),
                _ratio(r["schedule_cpu_ms"]["median"], base["schedule_cpu_ms"]["median"]),
                _ratio(r["quiet_schedule_ms"], base["quiet_schedule_ms"]),
                _ratio(r["mib_per_node"], base["mib_per_node"]),
                f"{r['marginal_mib_per_node']:.3f}" if "marginal_mib_per_node" in r else "-",
            )
            for r in results
        ],
    )
    return {"sizes": results, "wave": WAVE, "hosts": HOSTS, "node_shape": NODE_SHAPE}


def _ratio(value, base):
    return f"{value / base:.2f}x"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="10 and 30 nodes, 50 servers")
    parser.add_argument(
        "--one", nargs=2, type=int, metavar=("NODES", "SERVERS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_size(*args.one)))
        return
    sizes, servers = (QUICK_SIZES, QUICK_SERVERS) if args.quick else (SIZES, SERVERS)
    result = report(measure(sizes, servers))
    harness.record("scale-quick" if args.quick else "scale", result)


if __name__ == "__main__":
    main()
