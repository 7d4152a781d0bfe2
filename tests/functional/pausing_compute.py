"""``pcisim-compute`` whose flows a test can hold at the injection points.

    python -m tests.functional.pausing_compute --config-file F

The same ``main`` as the console script, with an action at every point of
``pcisim.faults``: when the file ``$PCISIM_TEST_GATES/arm-POINT`` exists, the first
flow to reach POINT takes it (an atomic rename), writes its details to
``reached-POINT`` and waits until ``release-POINT`` exists. A test sees that flow
held exactly at the point and can kill a process meanwhile (``processes.Gate``).
"""

import contextlib
import os
import pathlib
import time

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before anything else
from pcisim import faults
from pcisim.cmd import compute

POLL_SECONDS = 0.01


def holder(gates, point):
    """The action at ``point``: hold the flow there while the gate is armed."""
    armed, taken = gates / f"arm-{point}", gates / f"taken-{point}"
    reached, release = gates / f"reached-{point}", gates / f"release-{point}"

    def hold(instance=None, node=None):
        try:
            os.rename(armed, taken)
        except FileNotFoundError:
            return
        written = reached.with_suffix(".tmp")
        written.write_text(instance.uuid if instance is not None else str(node))
        os.rename(written, reached)
        while not release.exists():
            time.sleep(POLL_SECONDS)

    return hold


def main():
    gates = pathlib.Path(os.environ["PCISIM_TEST_GATES"])
    with contextlib.ExitStack() as stack:
        for point in sorted(faults.POINTS):
            stack.enter_context(faults.inject(point, holder(gates, point)))
        compute.main()


if __name__ == "__main__":
    main()
