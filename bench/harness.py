"""What every benchmark needs: an in-process control plane, counters, timing, tables."""

import contextlib
import json
import logging
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
import uuid

import sqlalchemy as sa

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import dbaccess, testing
from pcisim.db import engine, migration
from pcisim.objects.compute_node import ComputeNode

RESULTS = pathlib.Path(__file__).with_name("results.json")

# Tables go to stdout; only warnings and errors to stderr. kombu warns on every
# in-process connection that it has no host name.
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
logging.getLogger("kombu.connection").setLevel(logging.ERROR)


class ControlPlane:
    """A migrated SQLite file and a conductor on the in-process transport.

    This process acts as a compute: every object call is a real RPC round trip.
    """

    def __init__(self, transport_url=pcisim_conf.IN_PROCESS_TRANSPORT_URL):
        self.directory = tempfile.TemporaryDirectory(prefix="pcisim-bench-")
        pcisim_conf.parse_args([], default_config_files=[])
        url = f"sqlite:///{os.path.join(self.directory.name, 'bench.sqlite')}"
        pcisim_conf.CONF.set_override("connection", url, group="database")
        engine.configure()
        migration.db_sync()
        self.writes = 0
        sa.event.listen(engine.get_engine(), "after_execute", self._count)
        self.conductor = testing.InProcessConductor(transport_url)
        self.context = pcisim_context.get_admin_context()
        self._stack = contextlib.ExitStack()

    def _count(self, conn, statement, multiparams, params, execution_options, result):
        """Rows an INSERT, UPDATE or DELETE was given (one per parameter set)."""
        if getattr(statement, "is_dml", False):
            self.writes += len(multiparams) if multiparams else 1

    @property
    def round_trips(self):
        return self.conductor.calls.total()

    def __enter__(self):
        self.conductor.start()
        self._stack.enter_context(self.conductor.acting_as_compute("pcisim-bench"))
        return self

    def __exit__(self, *exc_info):
        self._stack.close()
        self.conductor.stop()
        with dbaccess.granted():
            engine.get_engine().dispose()
        self.directory.cleanup()


def compute_node(context, host="bench"):
    """A new compute node (a round trip when this process acts as a compute)."""
    node = ComputeNode(
        context,
        uuid=str(uuid.uuid4()),
        host=host,
        hypervisor_hostname=f"node-{uuid.uuid4().hex[:8]}",
        vcpus=64,
        memory_mb=262144,
        local_gb=2000,
    )
    node.create()
    return node


class Counters:
    """Wall time, round trips and row writes of one measured block."""

    def __init__(self, plane):
        self.plane = plane

    @contextlib.contextmanager
    def measure(self, into):
        trips, writes, start = self.plane.round_trips, self.plane.writes, time.perf_counter()
        yield
        into["seconds"] = time.perf_counter() - start
        into["round_trips"] = self.plane.round_trips - trips
        into["writes"] = self.plane.writes - writes


def summarize(samples):
    """Median, min and max of a list of numbers."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def progress(message):
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K{message}")
        sys.stderr.flush()


def done_progress():
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")


def print_table(title, header, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    line = "  ".join(f"{{:>{w}}}" for w in widths)
    print(f"\n{title}")
    print(line.format(*header))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


def ratio(value, base):
    """``value`` over ``base`` as a table cell (``1.23x``), ``-`` where there is no base."""
    return f"{value / base:.2f}x" if base else "-"


def machine():
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "system": platform.platform(),
    }


def record(name, result):
    """Store one benchmark's result in bench/results.json next to the others."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[name] = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **result,
    }
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
