"""pcisim: ``pcisim up`` runs the all-in-one control plane; the other commands talk to
its HTTP API (see ``pcisim.cli``)."""

import sys

from pcisim import cli


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["up"]:
        from pcisim.cmd import up

        return up.main(argv[1:])
    sys.exit(cli.run(cli.parser().parse_args(argv)))
