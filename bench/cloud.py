"""The control plane as an operator runs it: separate processes on RabbitMQ and PostgreSQL.

Processes, each started from its console script with an INI file of its own: the API,
two conductors sharing one topic, and 4 computes sharing the nodes (each 2 PFs x 8
VFs); a database of the run's own on PostgreSQL, migrated by ``pcisim-manage db sync``,
and topics of its own on RabbitMQ. Every service runs with ``--trace`` into one shared
file: the messages of each flow and the reschedules are counted from it afterwards
(writing it is part of the CPU measured).

Workload, as bench/scale.py's: one-VF servers in waves of 100, each wave POSTed over
HTTP by 16 client threads, then awaited; then the wave is deleted over HTTP and
awaited. Both scheduler modes, ``allocations`` and ``legacy``, in the same run, each on
a cloud of its own. The bench process watches the database, not the API, so that no
polling loads the services measured.

Measured per size and mode:
  boots       servers/second, from a wave's first POST to its last ACTIVE
  latency     POST-to-ACTIVE per server: from the client sending its POST to the
              ``updated_at`` the conductor wrote with ``active`` (one clock: the
              processes share a machine); median and p95. Not ``launched_at``: the
              compute sends it as oslo.versionedobjects' DateTime primitive, in whole
              seconds, which cut up to a second off every latency
  deletes     servers/second, from a wave's first DELETE to its last device freed
  CPU         user + system CPU of every service process (/proc) over the boot waves,
              per server; the same over the delete waves
  resched     ``reschedule`` messages: claims that failed on a compute
  ERRORs      servers that ended in ERROR
  messages    RPC messages of a boot's flow and of a delete's (the HTTP request not
              counted), from the trace

Goals (issue 13): no reschedule and no ERROR while capacity remains, as in process.

    python -m bench.cloud [--quick]
"""

from pcisim import concurrency

concurrency.select_backend()  # before bench.harness loads oslo.service

# isort: split
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from urllib import parse

import sqlalchemy as sa

from bench import harness
from pcisim.compute.states import ACTIVE

RABBIT_URL = os.environ.get("PCISIM_BENCH_RABBIT_URL", "rabbit://guest:guest@127.0.0.1:5672/")
POSTGRESQL_URL = os.environ.get(
    "PCISIM_BENCH_POSTGRESQL_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
SIZES, QUICK_SIZES = (10, 100), (10,)
SERVERS, QUICK_SERVERS = 500, 48
MODES = ("allocations", "legacy")
COMPUTES = 4
CONDUCTORS = 2
WAVE = 100
CLIENT_THREADS = 16
NODE_SHAPE = "pfs=2,vfs_per_pf=8"
DEVICE_SPEC = ['{"vendor_id": "8086"}']
ALIASES = ['{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}']
START_TIMEOUT = 120
STOP_TIMEOUT = 30
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
INSTANCES = sa.table(
    "instances",
    sa.column("uuid"),
    sa.column("vm_state"),
    sa.column("updated_at"),
    sa.column("deleted"),
)
DEVICES = sa.table("pci_devices", sa.column("instance_uuid"), sa.column("deleted"))


# ------------------------------------------------------------------ the cloud


class Cloud:
    """The processes of one control plane, in ``directory``, on a scratch database."""

    def __init__(self, directory, database_url, nodes, mode):
        self.directory = pathlib.Path(directory)
        self.port = _free_port()
        run = uuid.uuid4().hex[:8]
        self.trace_file = self.directory / "trace.jsonl"
        self.base = {
            "DEFAULT": {
                "state_path": self.directory,
                "transport_url": RABBIT_URL,
                "control_exchange": "pcisim_bench",
                "trace_file": self.trace_file,
            },
            "database": {"connection": database_url},
            "conductor": {"topic": f"conductor-bench-{run}"},
            "compute": {"topic": f"compute-bench-{run}"},
            "scheduler": {"claim_mode": mode},
            "oslo_messaging_rabbit": {"amqp_auto_delete": "true"},
            "pci": {"device_spec": DEVICE_SPEC, "alias": ALIASES},
            "api": {"listen": "127.0.0.1", "port": self.port},
        }
        self.inventories = _inventories(nodes)
        self.processes = {}

    def start(self):
        config = self._config("manage")
        _run(["pcisim-manage", "--config-file", config, "db", "sync"])
        for n in range(CONDUCTORS):
            self._spawn(f"conductor-{n}", "pcisim-conductor")
        for host, inventory in self.inventories.items():
            self._spawn(
                host, "pcisim-compute", DEFAULT={"host": host}, compute={"inventory": inventory}
            )
        self._spawn("api", "pcisim-api")
        return self

    def _spawn(self, name, script, **sections):
        config = self._config(name, **sections)
        log = open(self.directory / f"{name}.log", "w")  # noqa: SIM115 (closed in stop)
        process = subprocess.Popen(
            [_script(script), "--config-file", config, "--trace"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = (process, log)

    def _config(self, name, **sections):
        values = {section: dict(options) for section, options in self.base.items()}
        for section, options in sections.items():
            values.setdefault(section, {}).update(options)
        path = self.directory / f"{name}.conf"
        path.write_text(_ini(values))
        return path

    def cpu_seconds(self):
        """User + system CPU seconds of every service process so far."""
        return sum(_cpu_seconds(process.pid) for process, _ in self.processes.values())

    def check_running(self):
        dead = [name for name, (process, _) in self.processes.items() if process.poll() is not None]
        if dead:
            raise RuntimeError(f"service processes exited: {dead}; see {self.directory}/*.log")

    def stop(self):
        for process, _ in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process, log in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _inventories(nodes):
    """``COMPUTES`` hosts sharing ``nodes`` nodes: {host: [inventory line]}."""
    hosts = {f"compute-{h}": [] for h in range(min(COMPUTES, nodes))}
    for n in range(nodes):
        hosts[f"compute-{n % COMPUTES}"].append(f"node-{n:04d}={NODE_SHAPE}")
    return hosts


def _ini(sections):
    lines = []
    for section, options in sections.items():
        lines.append(f"[{section}]")
        for name, value in options.items():
            for item in value if isinstance(value, list) else [value]:
                lines.append(f"{name} = {str(item).replace('$', '$$')}")
        lines.append("")
    return "\n".join(lines)


def _script(name):
    return str(pathlib.Path(sys.executable).with_name(name))


def _run(command):
    command = [_script(command[0]), *map(str, command[1:])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr}")


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cpu_seconds(pid):
    """utime + stime of ``pid`` from /proc (fields 14 and 15, after the command)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _reachable(url):
    parsed = parse.urlsplit(url.replace("postgresql+psycopg2", "postgresql"))
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=2).close()
    except OSError:
        return False
    return True


# ------------------------------------------------------------- the database


class ScratchDatabase:
    """A database of the run's own on the PostgreSQL server, dropped afterwards."""

    def __init__(self):
        self.name = f"pcisim_bench_{uuid.uuid4().hex[:8]}"
        self.server = sa.create_engine(POSTGRESQL_URL, isolation_level="AUTOCOMMIT")
        with self.server.connect() as connection:
            connection.execute(sa.text(f"CREATE DATABASE {self.name}"))
        url = sa.engine.make_url(POSTGRESQL_URL).set(database=self.name)
        self.url = url.render_as_string(hide_password=False)
        self.engine = sa.create_engine(self.url)

    def states(self):
        """vm_state -> live instances."""
        query = (
            sa.select(INSTANCES.c.vm_state, sa.func.count())
            .where(INSTANCES.c.deleted == 0)
            .group_by(INSTANCES.c.vm_state)
        )
        with self.engine.connect() as connection:
            return dict(connection.execute(query).all())

    def launched(self, uuids):
        """{uuid: when it was written ACTIVE (aware UTC)} of the live ACTIVE instances
        among ``uuids``: nothing writes an instance after its ACTIVE until its delete."""
        query = sa.select(INSTANCES.c.uuid, INSTANCES.c.updated_at).where(
            INSTANCES.c.uuid.in_(uuids),
            INSTANCES.c.vm_state == ACTIVE,
            INSTANCES.c.deleted == 0,
        )
        with self.engine.connect() as connection:
            return {
                uuid_: at.replace(tzinfo=datetime.UTC) for uuid_, at in connection.execute(query)
            }

    def held_devices(self):
        query = sa.select(sa.func.count()).where(
            DEVICES.c.deleted == 0, DEVICES.c.instance_uuid.is_not(None)
        )
        with self.engine.connect() as connection:
            return connection.execute(query).scalar()

    def drop(self):
        self.engine.dispose()
        with self.server.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)"))
        self.server.dispose()


# ------------------------------------------------------------------- clients


class Client:
    """One client thread's HTTP connection to the API."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        payload = json.dumps(body) if body is not None else None
        self.connection.request(method, path, payload, headers)
        response = self.connection.getresponse()
        text = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {text[:200]!r}")
        return json.loads(text) if text else None


def _clients(port):
    """A client per thread of the pool (made on first use)."""
    local = threading.local()

    def client():
        if not hasattr(local, "client"):
            local.client = Client(port)
        return local.client

    return client


def _wait(done, what, timeout, cloud):
    deadline = time.monotonic() + timeout
    while not done():
        cloud.check_running()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _boot_wave(cloud, database, pool, client, first, count):
    """POST ``count`` servers, wait for them to end building; {uuid: POST time}."""

    def boot(n):
        body = {
            "server": {
                "name": f"bench-{n}",
                "pci_requests": "vf:1",
                "vcpus": 1,
                "memory_mb": 512,
                "root_gb": 1,
            }
        }
        posted = datetime.datetime.now(datetime.UTC)
        server = client().request("POST", "/servers", body)["server"]
        return server["id"], posted

    posted = dict(pool.map(boot, range(first, first + count)))
    _wait(lambda: not database.states().get("building"), "the wave to build", 600, cloud)
    return posted


def _delete_wave(cloud, database, pool, client, uuids):
    list(pool.map(lambda u: client().request("DELETE", f"/servers/{u}"), uuids))
    _wait(
        lambda: not database.states() and not database.held_devices(),
        "the wave to be deleted and its devices freed",
        600,
        cloud,
    )


def _warm_up(cloud, database, pool, client, nodes):
    """Wait for the API to list every node, then boot and delete one server: every
    service is up and serving. Raises if that server ends in ERROR."""
    deadline = time.monotonic() + START_TIMEOUT
    while len(_hypervisors(client)) < nodes:
        cloud.check_running()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API did not list {nodes} nodes in {START_TIMEOUT} s")
        time.sleep(0.5)
    _boot_wave(cloud, database, pool, client, 0, 1)
    if database.states().get("error"):
        raise RuntimeError(f"the warm-up server ended in ERROR; see {cloud.directory}/*.log")
    _delete_wave(cloud, database, pool, client, _live_uuids(database))


def _hypervisors(client):
    try:
        return client().request("GET", "/hypervisors")["hypervisors"]
    except (OSError, http.client.HTTPException):
        client().connection.close()
        return []


def _live_uuids(database):
    query = sa.select(INSTANCES.c.uuid).where(INSTANCES.c.deleted == 0)
    with database.engine.connect() as connection:
        return list(connection.scalars(query))


# ------------------------------------------------------------------ one run


def run(nodes, mode, servers):
    """One cloud of ``nodes`` nodes in ``mode``: boot and delete ``servers`` servers."""
    database = ScratchDatabase()
    directory = tempfile.TemporaryDirectory(prefix="pcisim-cloud-")
    cloud = Cloud(directory.name, database.url, nodes, mode)
    try:
        harness.progress(f"cloud: {nodes} nodes ({mode}): starting")
        cloud.start()
        client = _clients(cloud.port)
        with concurrent.futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            _warm_up(cloud, database, pool, client, nodes)
            cloud.trace_file.unlink(missing_ok=True)
            return _measure(cloud, database, pool, client, nodes, mode, servers)
    finally:
        harness.progress(f"cloud: {nodes} nodes ({mode}): stopping")
        cloud.stop()
        database.drop()
        directory.cleanup()


def _measure(cloud, database, pool, client, nodes, mode, servers):
    totals = {"boot_s": 0.0, "boot_cpu_s": 0.0, "delete_s": 0.0, "delete_cpu_s": 0.0}
    latencies, errors = [], 0
    for first in range(0, servers, WAVE):
        count = min(WAVE, servers - first)
        harness.progress(f"cloud: {nodes} nodes ({mode}): booting {first + count}/{servers}")
        start, cpu = time.perf_counter(), cloud.cpu_seconds()
        posted = _boot_wave(cloud, database, pool, client, first, count)
        totals["boot_s"] += time.perf_counter() - start
        totals["boot_cpu_s"] += cloud.cpu_seconds() - cpu
        launched = database.launched(list(posted))
        latencies += [(launched[u] - posted[u]).total_seconds() for u in launched]
        errors += len(posted) - len(launched)
        harness.progress(f"cloud: {nodes} nodes ({mode}): deleting {first + count}/{servers}")
        start, cpu = time.perf_counter(), cloud.cpu_seconds()
        _delete_wave(cloud, database, pool, client, list(posted))
        totals["delete_s"] += time.perf_counter() - start
        totals["delete_cpu_s"] += cloud.cpu_seconds() - cpu
    flows = _flows(cloud.trace_file)
    return {
        "nodes": nodes,
        "mode": mode,
        "servers": servers,
        "errors": errors,
        "boots_per_s": servers / totals["boot_s"],
        "deletes_per_s": servers / totals["delete_s"],
        "active_ms": _milliseconds(latencies),
        "cpu_ms_per_boot": totals["boot_cpu_s"] / servers * 1e3,
        "cpu_ms_per_delete": totals["delete_cpu_s"] / servers * 1e3,
        "reschedules": flows["reschedules"],
        "messages_per_boot": flows["boot"],
        "messages_per_delete": flows["delete"],
    }


def _flows(trace_file):
    """Median RPC messages of a boot's and a delete's flow, and reschedules, from the
    shared trace (records of one flow share its request id)."""
    by_request = {}
    with open(trace_file) as lines:
        for line in lines:
            record = json.loads(line)
            by_request.setdefault(record["request_id"], []).append(record)
    counts = {"boot": [], "delete": []}
    reschedules = 0
    for records in by_request.values():
        http_requests = [r["method"] for r in records if r["kind"] == "http"]
        rpc = [r for r in records if r["kind"] != "http"]
        reschedules += sum(r["method"] == "reschedule" for r in rpc)
        if http_requests and http_requests[0].startswith("POST /servers"):
            counts["boot"].append(len(rpc))
        elif http_requests and http_requests[0].startswith("DELETE /servers/"):
            counts["delete"].append(len(rpc))
    return {
        "reschedules": reschedules,
        "boot": statistics.median(counts["boot"]) if counts["boot"] else None,
        "delete": statistics.median(counts["delete"]) if counts["delete"] else None,
    }


def _milliseconds(seconds):
    ordered = sorted(seconds)
    return {
        "median": statistics.median(ordered) * 1e3,
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1e3,
    }


# ------------------------------------------------------------------- report


def report(results):
    title = (
        f"{results[0]['servers']} servers of one VF, waves of {min(WAVE, results[0]['servers'])} "
        f"from {CLIENT_THREADS} "
        f"HTTP clients; {CONDUCTORS} conductors, {COMPUTES} computes, the API: separate "
        f"processes on RabbitMQ and PostgreSQL; nodes of {NODE_SHAPE}"
    )
    harness.done_progress()
    harness.print_table(
        title,
        [
            "nodes",
            "mode",
            "boots/s",
            "active p50 ms",
            "p95 ms",
            "deletes/s",
            "CPU ms/boot",
            "CPU ms/delete",
            "resched",
            "ERRORs",
            "msgs/boot",
            "msgs/delete",
        ],
        [
            [
                r["nodes"],
                r["mode"],
                f"{r['boots_per_s']:.1f}",
                f"{r['active_ms']['median']:.0f}",
                f"{r['active_ms']['p95']:.0f}",
                f"{r['deletes_per_s']:.1f}",
                f"{r['cpu_ms_per_boot']:.0f}",
                f"{r['cpu_ms_per_delete']:.0f}",
                r["reschedules"],
                r["errors"],
                r["messages_per_boot"],
                r["messages_per_delete"],
            ]
            for r in results
        ],
    )
    by_size = {}
    for r in results:
        by_size.setdefault(r["nodes"], {})[r["mode"]] = r
    harness.print_table(
        "allocations / legacy, same run (lower is better but for boots/s)",
        ["nodes", "boots/s", "active p50", "active p95", "CPU/boot", "reschedules"],
        [
            [
                nodes,
                harness.ratio(m["allocations"]["boots_per_s"], m["legacy"]["boots_per_s"]),
                harness.ratio(
                    m["allocations"]["active_ms"]["median"], m["legacy"]["active_ms"]["median"]
                ),
                harness.ratio(
                    m["allocations"]["active_ms"]["p95"], m["legacy"]["active_ms"]["p95"]
                ),
                harness.ratio(m["allocations"]["cpu_ms_per_boot"], m["legacy"]["cpu_ms_per_boot"]),
                f"{m['allocations']['reschedules']} vs {m['legacy']['reschedules']}",
            ]
            for nodes, m in sorted(by_size.items())
            if set(m) == set(MODES)
        ],
    )
    return {
        "runs": results,
        "wave": WAVE,
        "clients": CLIENT_THREADS,
        "computes": COMPUTES,
        "conductors": CONDUCTORS,
        "node_shape": NODE_SHAPE,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.cloud",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SIZES} nodes, {QUICK_SERVERS} servers"
    )
    args = parser.parse_args(argv)
    missing = [
        name
        for name, url in (("RabbitMQ", RABBIT_URL), ("PostgreSQL", POSTGRESQL_URL))
        if not _reachable(url)
    ]
    if missing:
        print(f"bench.cloud: {' and '.join(missing)} unreachable on 127.0.0.1: not measured")
        return
    sizes, servers = (QUICK_SIZES, QUICK_SERVERS) if args.quick else (SIZES, SERVERS)
    results = [run(nodes, mode, servers) for nodes in sizes for mode in MODES]
    harness.record("cloud-quick" if args.quick else "cloud", report(results))


if __name__ == "__main__":
    main()
