"""Entry points of pcisim's commands."""

import sys

from oslo_config import cfg
from oslo_log import log as logging

from pcisim import conf as pcisim_conf


def prepare(binary, argv=None):
    """Parse the command line and configuration files and set up logging, or exit with
    a message naming what is wrong with them."""
    try:
        pcisim_conf.parse_args(sys.argv[1:] if argv is None else argv)
    except cfg.Error as error:
        sys.exit(f"{binary}: {error}")
    logging.setup(pcisim_conf.CONF, "pcisim")
