"""pcisim-compute: one compute host with simulated nodes, talking only to the conductor.

    pcisim-compute [--config-file F] [--trace]

The host name is ``[DEFAULT] host``; its nodes are ``[compute] inventory``; assignable
devices ``[pci] device_spec``. A bad inventory or device_spec stops it at startup with
a message naming the entry. SIGHUP reloads the inventory files (hot-plug and unplug);
SIGTERM and SIGINT stop it gracefully.
"""

import sys

from oslo_config import cfg
from oslo_log import log as logging

from pcisim import cmd, dbaccess, exception
from pcisim.compute import BINARY
from pcisim.compute import driver as compute_driver
from pcisim.pci import devspec

# NOTE: every module that imports oslo.messaging (or oslo.service) is imported inside
# the functions, once main() has selected the concurrency backend.

LOG = logging.getLogger(__name__)
CONF = cfg.CONF


def load_driver_and_specs():
    """The simulated driver and the device_spec, or exit naming what is wrong."""
    if not CONF.compute.inventory:
        sys.exit(f"{BINARY}: no [compute] inventory configured: give this host its nodes")
    try:
        driver = compute_driver.SimulatedDriver.from_config(CONF.compute.inventory)
        specs = devspec.DeviceSpecList.from_config(CONF.pci.device_spec)
    except exception.Invalid as error:
        sys.exit(f"{BINARY}: {error}")
    return driver, specs


def run_as_compute_process():
    """Every object call of this process goes to the conductor; the DB is off limits."""
    from pcisim import rpc
    from pcisim.conductor import rpcapi as conductor_rpcapi
    from pcisim.objects import base as objects_base

    objects_base.set_indirection_api(conductor_rpcapi.ConductorAPI(rpc.get_transport()))
    dbaccess.forbid(BINARY)


def main(argv=None):
    cmd.select_backend(BINARY)
    from pcisim import service as pcisim_service
    from pcisim.compute import service as compute_service

    cmd.prepare_service(BINARY, argv)
    driver, specs = load_driver_and_specs()
    cmd.check_transport_url(BINARY)
    run_as_compute_process()
    service = compute_service.ComputeService(CONF.host, driver, specs)
    pcisim_service.serve([service], reload=driver.reload)
