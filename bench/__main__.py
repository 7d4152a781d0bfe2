"""``python -m bench [--quick] [NAME ...]``: every benchmark (or those named), one after
the other, each in a process of its own so that none inherits another's configuration,
threads or memory; each prints its tables and adds its results to bench/results.json.
"""

import subprocess
import sys
import time

BENCHMARKS = ("tracker", "nova_tracker", "rpc", "archive", "scale", "cloud")


def main(argv):
    quick = ["--quick"] if "--quick" in argv else []
    names = [arg for arg in argv if arg != "--quick"] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        sys.exit(f"bench: no benchmark {', '.join(unknown)}; there are {', '.join(BENCHMARKS)}")
    failed = []
    for name in names:
        print(f"\n== {name}", flush=True)
        started = time.monotonic()
        if subprocess.run([sys.executable, "-m", f"bench.{name}", *quick]).returncode:
            failed.append(name)
        print(f"({name}: {time.monotonic() - started:.0f} s)", flush=True)
    if failed:
        sys.exit(f"bench: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
