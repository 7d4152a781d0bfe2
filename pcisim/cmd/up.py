"""pcisim up: the whole control plane in one process, on the embedded defaults.

    pcisim up [--nodes N] [--inventory FILE]... [--port P] [--config-file F] [--trace]

A conductor, compute hosts with simulated PCI inventories and the HTTP API, talking
over the in-process transport (every compute-side object call still goes to the
conductor over RPC) to a SQLite file under ./state, which it creates or migrates.
A second start reuses the state. Ctrl-C stops it cleanly. With ``--trace`` every
message is recorded to ``[DEFAULT] trace_file`` for ``pcisim trace``.
"""

import os
import sys

from oslo_config import cfg
from oslo_log import log as logging

from pcisim import cmd, dbaccess, exception, trace
from pcisim.compute import driver as compute_driver
from pcisim.pci import devspec

# NOTE: every module that imports oslo.messaging (or oslo.service) is imported inside
# the functions, once main() has selected the concurrency backend.

LOG = logging.getLogger(__name__)
CONF = cfg.CONF
BINARY = "pcisim up"

cli_opts = [
    cfg.IntOpt(
        "nodes",
        default=2,
        min=1,
        max=512,
        help="Simulated compute nodes: GPU and SR-IOV NIC nodes in turn.",
    ),
    cfg.MultiStrOpt(
        "inventory",
        default=[],
        metavar="FILE",
        help="An inventory file per compute host, instead of --nodes.",
    ),
    cfg.PortOpt("port", help="Port of the HTTP API (default: [api] port, 8774)."),
]
DEFAULT_DEVICE_SPEC = ['{"vendor_id": "10de"}', '{"vendor_id": "8086"}']
DEFAULT_ALIASES = [
    '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8", "device_type": "type-PCI"}',
    '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
    '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
]
GPU_NODE = "gpus=4,numa_nodes=2,vcpus=32,memory_mb=131072"
NIC_NODE = "pfs=2,vfs_per_pf=8,numa_nodes=2,vcpus=32,memory_mb=131072"


def drivers():
    """Compute host name -> simulated driver, from --inventory or --nodes."""
    if CONF.inventory:
        return {
            f"compute-{n}": compute_driver.SimulatedDriver.from_config([path])
            for n, path in enumerate(CONF.inventory, start=1)
        }
    shapes = [(GPU_NODE, "gpu"), (NIC_NODE, "nic")]
    return {
        f"compute-{n}": compute_driver.SimulatedDriver.from_config(
            [f"{shapes[(n - 1) % 2][1]}-node-{n}={shapes[(n - 1) % 2][0]}"]
        )
        for n in range(1, CONF.nodes + 1)
    }


def build(transport_url=None):
    """Every service of the all-in-one, ready to launch, and the API's URL.

    The configuration is checked whole before the database is touched, so that a bad
    value leaves the state as it was.
    """
    from pcisim import rpc, wsgi
    from pcisim.api import app as api_app
    from pcisim.compute import api as compute_api
    from pcisim.compute import service as compute_service
    from pcisim.conductor import rpcapi as conductor_rpcapi
    from pcisim.conductor import service as conductor_service
    from pcisim.db import migration
    from pcisim.objects import base as objects_base
    from pcisim.pci import request

    specs = devspec.DeviceSpecList.from_config(CONF.pci.device_spec or DEFAULT_DEVICE_SPEC)
    aliases = request.parse_aliases(CONF.pci.alias or DEFAULT_ALIASES)
    hosts = drivers()
    wsgi.check_listen(CONF.api.listen, CONF.api.auth_token)
    cmd.configure_database()
    migration.db_sync()
    create_demo_flavors(aliases)
    conductor = conductor_service.ConductorService(transport_url)
    conductor_service.register()
    dbaccess.forbid("pcisim up (outside the conductor)")
    transport = rpc.get_transport(url=transport_url)
    objects_base.set_indirection_api(conductor_rpcapi.ConductorAPI(transport))
    computes = [
        compute_service.ComputeService(host, driver, specs, transport_url)
        for host, driver in hosts.items()
    ]
    app = api_app.create_app(
        api_app.Api(compute=compute_api.API(transport, aliases)),
        auth_token=CONF.api.auth_token,
        users=CONF.api.users,
    )
    api = wsgi.WSGIService(app, CONF.api.listen, CONF.api.port if CONF.port is None else CONF.port)
    return [conductor, *computes, api], api.url


def demo_flavors(aliases):
    """The flavors a first start creates for the Nova face: ``m1.small``, and one per
    PCI alias (``gpu.small`` asks for one ``gpu``)."""
    small = {"memory_mb": 2048, "vcpus": 2, "root_gb": 10}
    flavors = [("m1.small", {})]
    flavors += [(f"{name}.small", {"pci_passthrough:alias": f"{name}:1"}) for name in aliases]
    return [
        ({"flavorid": name, "name": name, **small, "description": None}, extra_specs)
        for name, extra_specs in flavors
    ]


def create_demo_flavors(aliases):
    """Create the demo flavors a previous start did not (run before the database is
    handed to the conductor)."""
    from pcisim import context as pcisim_context
    from pcisim.compute import flavors as compute_flavors
    from pcisim.objects.flavor import Flavor

    context = pcisim_context.get_admin_context()
    for values, extra_specs in demo_flavors(aliases):
        compute_flavors.check_extra_specs(extra_specs, aliases, values["vcpus"])
        try:
            Flavor(context, extra_specs=extra_specs, **values).create()
        except (exception.FlavorIdExists, exception.FlavorExists):
            LOG.debug("Flavor %s exists already", values["name"])


def banner(url):
    from pcisim import conf as pcisim_conf

    url_option = "" if url == "http://127.0.0.1:8774" else f" --url {url}"
    print(
        f"\npcisim is up: API at {url}  (state in {pcisim_conf.state_path()}, Ctrl-C stops)\n"
        f"\n  pcisim{url_option} server create gpu-vm --pci gpu:1 --wait"
        f"\n  pcisim{url_option} server show SERVER_ID      # its host and GPU, allocated"
        f"\n  pcisim{url_option} server delete SERVER_ID --wait\n"
        f"\nOpenStack tools (Nova's API; clouds.yaml in the README):"
        f"\n  openstack --os-auth-type none --os-endpoint {url}/v2.1 "
        f"--os-identity-api-version 3 server list\n"
        f"{_trace_hint()}",
        flush=True,
    )


def _trace_hint():
    recording = trace.path()
    if recording is None:
        return ""
    file_option = "" if recording == os.path.abspath(trace.DEFAULT_FILE) else f" --file {recording}"
    return f"\nTracing every message; the last flow:  pcisim trace{file_option} [--mermaid]\n"


def main(argv):
    cmd.select_backend(BINARY)
    from pcisim import conf as pcisim_conf
    from pcisim import rpc
    from pcisim import service as pcisim_service

    CONF.register_cli_opts(cli_opts)
    cmd.prepare_service(BINARY, argv)
    cmd.check_transport_url(BINARY)
    try:
        services, url = build()
    except exception.Invalid as error:
        sys.exit(f"{BINARY}: {error}")
    except OSError as error:
        sys.exit(f"{BINARY}: {error.strerror or error}")
    except cmd.DATABASE_ERRORS as error:
        database = pcisim_conf.database_connection()
        sys.exit(
            f"{BINARY}: cannot reach the database {rpc.safe_url(database)}: "
            f"{cmd.database_error(error, database)}"
        )

    # NOTE: called once every service is ready, so the first boot finds its computes.
    pcisim_service.serve(services, started=lambda: banner(url))
