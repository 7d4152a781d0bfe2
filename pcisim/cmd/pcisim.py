"""pcisim: the project's command line. ``pcisim up`` runs the all-in-one control plane."""

import sys

COMMANDS = {"up": "pcisim.cmd.up"}
USAGE = "usage: pcisim up [--nodes N] [--inventory FILE]... [--port P] [--config-file F]"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"{USAGE}\npcisim: unknown command {argv[0]!r}" if argv else USAGE)
    module = __import__(COMMANDS[argv[0]], fromlist=["main"])
    module.main(argv[1:])
