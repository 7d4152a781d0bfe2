"""pcisim: ``pcisim up`` runs the all-in-one control plane; the other commands talk to
its HTTP API (see ``pcisim.cli``)."""

import os
import sys

from pcisim import cli


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = cli.run(cli.parse_args(argv))
        sys.stdout.flush()
    except BrokenPipeError:
        # NOTE: a reader such as head went away: that ends the output, quietly, and
        # stdout goes to /dev/null so that the interpreter's own flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
