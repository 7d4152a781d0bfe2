"""Entry points of pcisim's commands."""

import sys

from oslo_config import cfg
from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import trace


def prepare(binary, argv=None):
    """Parse the command line and configuration files and set up logging, or exit with
    a message naming what is wrong with them."""
    try:
        pcisim_conf.parse_args(sys.argv[1:] if argv is None else argv)
    except cfg.Error as error:
        sys.exit(f"{binary}: {error}")
    logging.setup(pcisim_conf.CONF, "pcisim")


def prepare_service(binary, argv=None):
    """``prepare`` for a long-running service, which also takes ``--trace``."""
    pcisim_conf.CONF.register_cli_opts(pcisim_conf.trace_cli_opts)
    prepare(binary, argv)
    if pcisim_conf.CONF.trace:
        path = pcisim_conf.CONF.trace_file
        try:
            trace.start(path, default_actor=binary)
        except OSError as error:
            sys.exit(f"{binary}: cannot record the trace to {path}: {error.strerror}")
        logging.getLogger(__name__).info("Recording every message to %s", trace.path())
