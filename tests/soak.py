"""``make soak``: the PCI state machine for many examples, then what it did.

Runs ``tests/functional/pci_machine.PciMachine`` on one in-process control plane
(SQLite in a temporary directory, the in-process transport) in rounds of examples
until the time is up (``PCISIM_SOAK_SECONDS``, default 600). A round that finds a
failure prints hypothesis's shrunk reproduction and the next round starts afresh, so
one bug does not end the soak. At the end it prints the operations run per rule, the
faults injected per point, the invariant violations and leaked devices found, and the
wall time. Exits 1 when anything was found.

    python -m tests.soak [SECONDS]
"""

import os
import pathlib
import sys
import tempfile
import time
import traceback

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before anything else
from pcisim import conf as pcisim_conf
from tests import backends
from tests.functional import pci_machine

EXAMPLES_PER_ROUND = 25
SOAK_SETTINGS = settings(
    max_examples=EXAMPLES_PER_ROUND,
    stateful_step_count=40,
    deadline=None,
    database=None,  # NOTE: each round explores afresh instead of replaying a failure
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


class _TmpPaths:
    """What ``ScratchDatabase`` asks of pytest's ``tmp_path_factory``."""

    def __init__(self, directory):
        self.directory = directory

    def mktemp(self, name):
        return pathlib.Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.directory))


def soak(seconds):
    pcisim_conf.parse_args([], default_config_files=[])
    stats = pci_machine.STATS
    failures = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pcisim-soak-") as directory:
        scratch = backends.ScratchDatabase("sqlite", _TmpPaths(directory))
        harness = pci_machine.Harness(scratch).start()
        pci_machine.PciMachine.harness = harness
        try:
            rounds = 0
            while time.monotonic() - started < seconds:
                rounds += 1
                try:
                    run_state_machine_as_test(pci_machine.PciMachine, settings=SOAK_SETTINGS)
                except Exception as error:
                    failures.append(error)
                    print(f"--- round {rounds} failed:", file=sys.stderr)
                    traceback.print_exception(error, file=sys.stderr)
                    harness.broken = True
        finally:
            harness.stop()
            scratch.drop()
    report(stats, failures, rounds, time.monotonic() - started)
    return 1 if failures or stats.leaked else 0


def report(stats, failures, rounds, wall):
    print()
    print(f"pcisim soak: {rounds} rounds, {stats.examples} examples, {wall:.0f} s wall time")
    print(f"operations run: {sum(stats.rules.values())}")
    for name, count in sorted(stats.rules.items()):
        print(f"  {name:20} {count}")
    print("outcomes:")
    for name, count in sorted(stats.outcomes.items()):
        print(f"  {name:40} {count}")
    print(f"faults injected: {sum(stats.faults.values())}")
    for name, count in sorted(stats.faults.items()):
        print(f"  {name:40} {count}")
    print(f"invariant violations found: {len(failures)} failing rounds")
    for name, count in sorted(stats.violations.items()):
        print(f"  {name:70} {count} checks failed (shrinking included)")
    for error in failures:
        print(f"  {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
    print(f"leaked devices found: {len(stats.leaked)}")
    for host, address, holder in sorted(stats.leaked, key=str):
        print(f"  {host} {address} held by {holder}")
    print(f"control plane resets: {stats.resets}, rebuilds: {stats.rebuilds}")
    print(f"wall time: {wall:.1f} s")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    seconds = float(argv[0] if argv else os.environ.get("PCISIM_SOAK_SECONDS", 600))
    sys.exit(soak(seconds))


if __name__ == "__main__":
    main()
