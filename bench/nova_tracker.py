"""pcisim's PCI tracker against Nova 34's own, on the fixed workload of bench/tracker.py.

Inventory: 64 PFs x 16 VFs = 1,088 devices. Phases:
  P1  first sync on an empty database + save
  P2  the same report again + save
  P3  512 instances each claim and allocate one VF, saving after every instance
  P4  free them all, saving after each
and the cost of one claim (pools only, no save) at 1,088 devices.

pcisim runs as a compute does (bench/tracker.py's functions): every save is a round
trip to a conductor over kombu+memory, which writes a SQLite file. Nova runs
``nova.pci.manager.PciDevTracker`` in process with no RPC at all, its objects writing
their own SQLite file, in a virtualenv of its own (bench/.nova-venv, created on first
use with ``pip install nova==34.0.0``) driven by bench/nova_driver.py. Writes are
INSERT/UPDATE/DELETE rows on both sides; Nova's transactions are its commits (each
pcisim round trip is one conductor transaction). Runs alternate, pcisim then Nova (each
on a new compute node; Nova in a new process and database), so that both see the
machine's load alike; the speedup is Nova's median over pcisim's. If Nova cannot be
installed or run, the table says why and shows pcisim alone.

Nova's SQLite is oslo.db's default (as in the issue's figures): a new connection per
transaction, rollback journal, a disk sync at every commit. ``--nova-sqlite pcisim``
gives Nova's engine pcisim's own setup instead (db/sqlite.py: pooled WAL connections),
to compare the trackers alone.

    python -m bench.nova_tracker [--quick] [--runs N] [--nova-sqlite oslo.db|pcisim]

--quick: 4 PFs x 8 VFs, 16 instances, one run; Nova only if its virtualenv exists already.
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

from bench import harness, tracker
from pcisim.pci.manager import PciDevTracker

NOVA = "nova==34.0.0"
VENV = pathlib.Path(__file__).with_name(".nova-venv")
DRIVER = pathlib.Path(__file__).with_name("nova_driver.py")
PYTHON = VENV / "bin" / "python"
GOAL = 20
FULL = {"pfs": 64, "vfs": 16, "instances": 512}
QUICK = {"pfs": 4, "vfs": 8, "instances": 16}
ISSUE_FIGURES = "P1 5.5 s, P2 4.7 s, P3 18.3 s, P4 15.4 s, one claim 2.4 ms"


def _nova_installed():
    probe = "import importlib.metadata as m, nova.pci.manager; print(m.version('nova'))"
    if not PYTHON.exists():
        return False
    found = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True)
    return found.returncode == 0 and found.stdout.strip() == NOVA.split("==")[1]


def _why(output):
    """The error lines of a failed command's output (else its last lines), shortened."""
    lines = output.strip().splitlines()
    errors = [line for line in lines if line.startswith("ERROR")] or lines
    return " | ".join(line[:200] for line in errors[-3:]) or "no output"


def install_nova():
    """Create the Nova virtualenv if needed; None when ready, else why it is not."""
    if _nova_installed():
        return None
    harness.progress(f"nova_tracker: installing {NOVA} into {VENV} (about 40 s)")
    # NOTE: the venv is made from this Python, so both sides run on one interpreter.
    steps = (
        [sys.executable, "-m", "venv", VENV],
        [PYTHON, "-m", "pip", "install", "--quiet", NOVA],
    )
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"{' '.join(map(str, step))} took over 15 minutes"
        if done.returncode != 0:
            return f"{' '.join(map(str, step))} failed: {_why(done.stderr)}"
    return None


def run_nova(sqlite, label, pfs, vfs, instances):
    """One run of bench/nova_driver.py: (result, None) or (None, why it failed)."""
    command = [PYTHON, DRIVER, sqlite, pfs, vfs, instances]
    result = None
    with tempfile.TemporaryFile("w+") as errors:
        with subprocess.Popen(
            list(map(str, command)), stdout=subprocess.PIPE, stderr=errors, text=True
        ) as driver:
            for line in driver.stdout:
                if not line.startswith("{"):
                    continue
                message = json.loads(line)
                harness.progress(f"nova_tracker: {label}, Nova, {message.get('progress', 'done')}")
                result = message.get("result", result)
        errors.seek(0)
        if driver.returncode != 0 or result is None:
            return None, f"the Nova driver failed: {_why(errors.read())}"
    return result, None


def run_pcisim(plane, label, pfs, vfs, instances):
    """One run of bench/tracker.py's phases (on a new compute node) and claim cost."""
    harness.progress(f"nova_tracker: {label}, pcisim")
    phases = tracker.run_phases(plane, PciDevTracker, pfs, vfs, instances)
    return {"phases": phases, "claim_us": tracker.claim_cost(plane, pfs, vfs)}


def nova_available(args):
    """None when Nova can run, else why it cannot."""
    if args.quick and not _nova_installed():
        return f"--quick does not install Nova; run once without --quick to create {VENV}"
    return install_nova()


def measure(args, shape, runs):
    """Alternate pcisim's and Nova's runs, so that both see the machine's load alike.

    Returns pcisim's runs, Nova's runs (none when it is unavailable) and why not.
    pcisim's control plane can be set up once per process: it idles (a few percent of
    a core) while Nova runs.
    """
    ours, theirs, why_no_nova = [], [], nova_available(args)
    with harness.ControlPlane() as plane:
        for run in range(runs):
            label = f"run {run + 1}/{runs}"
            ours.append(run_pcisim(plane, label, *shape.values()))
            if not why_no_nova:
                result, why_no_nova = run_nova(args.nova_sqlite, label, *shape.values())
                theirs.append(result)
    harness.done_progress()
    return ours, (theirs if not why_no_nova else []), why_no_nova


def phase_summary(runs, phase):
    """Median/min/max seconds of a phase and the counters of its first run."""
    first = runs[0]["phases"][phase]
    counters = {key: value for key, value in first.items() if key != "seconds"}
    seconds = [run["phases"][phase]["seconds"] for run in runs]
    return {"seconds": harness.summarize(seconds), **counters}


def _ratio(ours, nova):
    return nova / ours if nova is not None else None


def compare(pcisim, nova):
    """Per phase: pcisim's and Nova's summaries and Nova's median time over pcisim's."""
    phases = {}
    for phase in tracker.PHASES:
        ours = phase_summary(pcisim, phase)
        theirs = phase_summary(nova, phase) if nova else None
        median = theirs["seconds"]["median"] if theirs else None
        phases[phase] = {
            "pcisim": ours,
            "nova": theirs,
            "speedup": _ratio(ours["seconds"]["median"], median),
        }
    return phases


def compare_claims(shape, pcisim, nova):
    """Microseconds per claim (median of the runs) at the run's inventory size."""
    ours = statistics.median(run["claim_us"] for run in pcisim)
    theirs = statistics.median(run["claim_us"] for run in nova) if nova else None
    return {
        "devices": shape["pfs"] * (shape["vfs"] + 1),
        "pcisim_us": ours,
        "nova_us": theirs,
        "speedup": _ratio(ours, theirs),
    }


def _seconds(summary):
    if summary is None:
        return ("n/a", "n/a")
    s = summary["seconds"]
    return (f"{s['median']:.3f}", f"{s['min']:.3f}-{s['max']:.3f}")


def _times(speedup):
    if speedup is None:
        return ("n/a", "n/a")
    return (f"{speedup:.1f}x", "yes" if speedup >= GOAL else "no")


def phase_rows(phases):
    rows = []
    for phase, values in phases.items():
        ours, theirs = values["pcisim"], values["nova"] or {}
        rows.append(
            (
                phase,
                *_seconds(ours),
                ours["round_trips"],
                ours["writes"],
                *_seconds(values["nova"]),
                theirs.get("transactions", "n/a"),
                theirs.get("writes", "n/a"),
                *_times(values["speedup"]),
            )
        )
    return rows


def claim_row(claim):
    nova = "n/a" if claim["nova_us"] is None else f"{claim['nova_us']:.1f}"
    return (claim["devices"], f"{claim['pcisim_us']:.1f}", nova, *_times(claim["speedup"]))


def print_report(result):
    shape, nova = result["shape"], result["nova"]
    harness.print_table(
        f"PCI tracker, pcisim vs Nova 34 ({nova['sqlite']} SQLite): {shape['pfs']} PFs x "
        f"{shape['vfs']} VFs, {shape['instances']} instances, median of {result['runs']} "
        "run(s) (seconds: median, min-max)",
        (
            "phase",
            "pcisim s",
            "min-max",
            "trips",
            "writes",
            "Nova s",
            "min-max",
            "Nova txns",
            "Nova writes",
            "speedup",
            f">={GOAL}x",
        ),
        phase_rows(result["phases"]),
    )
    harness.print_table(
        "One claim (pools only, no save)",
        ("devices", "pcisim us", "Nova us", "speedup", f">={GOAL}x"),
        [claim_row(result["claim"])],
    )
    for note in notes(result):
        print(f"\n{note}")


def notes(result):
    """What the reader must know to read the tables right."""
    nova, full = result["nova"], result["shape"] == FULL
    yield (
        "trips: pcisim's RPC round trips, one conductor transaction each. Nova makes none: "
        "its objects write in process, one transaction (txn) per device saved."
    )
    if nova["unavailable"]:
        yield f"Nova reference unavailable: {nova['unavailable']}"
    if not full:
        yield (
            "Quick run: a small inventory, where Nova's per-save scan of every device is "
            "cheap; these ratios are not the issue's."
        )
    elif nova["sqlite"] == "oslo.db":
        yield f"The issue's figures for Nova on this kind of machine: {ISSUE_FIGURES}."


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.nova_tracker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="4 PFs x 8 VFs, 16 instances, one run")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    parser.add_argument(
        "--nova-sqlite",
        choices=("oslo.db", "pcisim"),
        default="oslo.db",
        help="Nova's SQLite setup: oslo.db's default, or pcisim's pooled WAL connections",
    )
    args = parser.parse_args(argv)
    shape, runs = (QUICK, 1) if args.quick else (FULL, args.runs)
    pcisim, nova, why_no_nova = measure(args, shape, runs)
    result = {
        "shape": shape,
        "runs": runs,
        "nova": {"sqlite": args.nova_sqlite, "unavailable": why_no_nova},
        "phases": compare(pcisim, nova),
        "claim": compare_claims(shape, pcisim, nova),
    }
    print_report(result)
    harness.record(record_name(args), result)
    return result


def record_name(args):
    """One entry of bench/results.json per kind of run, so that none hides another."""
    quick = "-quick" if args.quick else ""
    sqlite = "-pcisim-sqlite" if args.nova_sqlite == "pcisim" else ""
    return f"nova_tracker{quick}{sqlite}"


if __name__ == "__main__":
    main()
