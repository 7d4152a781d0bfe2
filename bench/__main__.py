"""``python -m bench``: every benchmark, one table each; results in bench/results.json."""

import sys

from bench import tracker

BENCHMARKS = {"tracker": tracker.main}


def main(argv):
    quick = ["--quick"] if "--quick" in argv else []
    for name, run in BENCHMARKS.items():
        print(f"== {name}")
        run(quick)


if __name__ == "__main__":
    main(sys.argv[1:])
