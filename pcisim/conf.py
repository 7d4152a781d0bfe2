"""pcisim's configuration: its own options and the embedded defaults of its libraries.

Every process uses the global ``cfg.CONF``: oslo.messaging registers some of its
option groups only there, and a private ``ConfigOpts`` breaks RPC calls.

Embedded defaults, so that a process with no configuration file at all runs:
- ``[DEFAULT] state_path = ./state``, where the SQLite database and other state live;
- ``[database] connection``: unset means ``sqlite:///<state_path>/pcisim.sqlite``;
- ``[DEFAULT] transport_url = kombu+memory:////``, kombu's in-process transport with
  real serialization (``fake:/`` polls every 50 ms and hides serialization bugs);
- ``[DEFAULT] executor_thread_pool_size = 8`` handler threads per RPC server, not 64.
"""

import os
import socket

from oslo_config import cfg
from oslo_db import options as db_options
from oslo_log import log as logging
from oslo_messaging import opts as messaging_opts

CONF = cfg.CONF

IN_PROCESS_TRANSPORT_URL = "kombu+memory:////"
SQLITE_FILE_NAME = "pcisim.sqlite"
# NOTE: oslo.messaging's default of 64 handler threads per RPC server let 64 requests
# at once queue on the database and the GIL of one process; 8 boot faster on less CPU
# (bench/README.md, "Handler threads").
RPC_HANDLER_THREADS = 8

default_opts = [
    cfg.StrOpt(
        "state_path",
        default="./state",
        help="Directory holding pcisim's state, such as the default SQLite database.",
    ),
    cfg.HostAddressOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current hostname>",
        help="Name of this service's host; a compute's RPC server listens under it.",
    ),
]

trace_opts = [
    cfg.StrOpt(
        "trace_file",
        default="$state_path/trace.jsonl",
        help="Where --trace records messages, one JSON line each; `pcisim trace` reads it.",
    ),
]

trace_cli_opts = [
    cfg.BoolOpt(
        "trace",
        default=False,
        help="Record every RPC message and HTTP request to [DEFAULT] trace_file.",
    ),
]

service_opts = [
    cfg.IntOpt(
        "report_interval",
        default=10,
        min=1,
        help="Seconds between a service's heartbeats.",
    ),
    cfg.IntOpt(
        "service_down_time",
        default=60,
        min=1,
        help="A service that has not reported in this many seconds is considered down.",
    ),
]

compute_opts = [
    cfg.StrOpt("topic", default="compute", help="RPC topic computes serve."),
    cfg.IntOpt(
        "update_resources_interval",
        default=60,
        min=1,
        help="Seconds between a compute's periodic resource updates.",
    ),
    cfg.MultiStrOpt(
        "inventory",
        default=[],
        help="Simulated nodes of this compute: NAME=PATH (a JSON or YAML inventory), "
        "NAME=SHORT_FORM (e.g. pfs=4,vfs_per_pf=8), or PATH of a multi-node file.",
    ),
]

api_opts = [
    cfg.HostAddressOpt(
        "listen",
        default="127.0.0.1",
        help="Address the HTTP API listens on. Any address but a loopback one needs "
        "[api] auth_token.",
    ),
    cfg.PortOpt("port", default=8774, help="Port the HTTP API listens on."),
    cfg.StrOpt(
        "auth_token",
        secret=True,
        help="Token every HTTP API request must carry in its X-Auth-Token header; unset, "
        "the API takes requests without one and listens only on a loopback address.",
    ),
    cfg.ListOpt(
        "users",
        default=[],
        secret=True,
        help="name:password of each user the identity face (/identity/v3) issues a token "
        "to when [api] auth_token is set; the token it issues is auth_token.",
    ),
    cfg.ListOpt(
        "images",
        default=["cirros-0.6.3", "ubuntu-24.04"],
        help="Names of the images the Nova face's minimal image service lists (servers "
        "are booted from one by id); each id is derived from its name.",
    ),
]

scheduler_opts = [
    cfg.IntOpt(
        "max_attempts",
        default=3,
        min=1,
        help="Hosts to try for one instance before it goes to ERROR.",
    ),
    cfg.StrOpt(
        "claim_mode",
        default="allocations",
        choices=[
            ("allocations", "the scheduler allocates capacity on the node it chooses"),
            (
                "legacy",
                "the scheduler chooses from published free pools; the compute's "
                "claim decides (kept to measure against)",
            ),
        ],
        help="How capacity is claimed when an instance is scheduled.",
    ),
    cfg.FloatOpt(
        "view_max_age",
        default=1.0,
        min=0.0,
        help="Seconds a conductor's scheduler may choose from its last read of the "
        "nodes and the hosts up before it reads them again (allocations mode). Its own "
        "claims it always sees; what others changed meanwhile it may not, and the "
        "node's generation then refuses the claim and the choice is made again from a "
        "fresh read, as is one that finds no room. 0 reads before every choice.",
    ),
]

filter_scheduler_opts = [
    cfg.IntOpt(
        "host_subset_size",
        default=3,
        min=1,
        help="Choose the node at random among this many of the best that fit, so that "
        "concurrent requests seldom choose the same one.",
    ),
]

conductor_opts = [
    cfg.StrOpt(
        "topic",
        default="conductor",
        help="RPC topic the conductor serves. Control planes sharing one message "
        "broker need different topics.",
    ),
]

upgrade_levels_opts = [
    cfg.StrOpt(
        "conductor",
        help="Newest conductor RPC API version to send, for rolling upgrades; "
        "unset means the newest this code knows.",
    ),
]

pci_opts = [
    cfg.MultiStrOpt(
        "device_spec",
        default=[],
        help="Which reported PCI devices are assignable, and their tags. Each value is a "
        'JSON dict or list of dicts, e.g. {"vendor_id": "8086", "product_id": "1520", '
        '"address": "*:0a:00.*", "physical_network": "physnet1"}. Ids are 4 hex digits '
        'in any case, or "*".',
    ),
    cfg.MultiStrOpt(
        "alias",
        default=[],
        help="Names for PCI requests. Each value is a JSON dict, e.g. "
        '{"name": "nic", "vendor_id": "8086", "product_id": "1520", '
        '"device_type": "type-VF", "numa_policy": "legacy"}. Ids are 4 hex digits in any '
        "case. Repeating a name ORs the specs.",
    ),
]


otel_opts = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="Export OpenTelemetry traces over OTLP: a span of each HTTP request the API "
        "serves (oslo.middleware's tracing) and of each RPC message sent and handled "
        "(oslo.messaging's tracing), with the object, remotable method and object "
        "version of object calls. Needs the otel extra: pip install 'pcisim[otel]'.",
    ),
    cfg.URIOpt(
        "otlp_endpoint",
        default="http://localhost:4318",
        schemes=["http", "https"],
        help="The OTLP/HTTP collector traces are sent to, at <endpoint>/v1/traces.",
    ),
]


def register_opts(conf=CONF):
    """Register every option pcisim reads, with pcisim's defaults."""
    conf.register_opts(default_opts)
    conf.register_opts(service_opts)
    conf.register_opts(trace_opts)
    conf.register_opts(compute_opts, group="compute")
    conf.register_opts(scheduler_opts, group="scheduler")
    conf.register_opts(filter_scheduler_opts, group="filter_scheduler")
    conf.register_opts(api_opts, group="api")
    conf.register_opts(conductor_opts, group="conductor")
    conf.register_opts(upgrade_levels_opts, group="upgrade_levels")
    conf.register_opts(pci_opts, group="pci")
    conf.register_opts(otel_opts, group="otel")
    db_options.set_defaults(conf)
    # A mini control plane should say "unreachable" in seconds, not after oslo.db's
    # default of ten retries ten seconds apart.
    conf.set_default("max_retries", 3, group="database")
    conf.set_default("retry_interval", 1, group="database")
    for group, opts in messaging_opts.list_opts():
        conf.register_opts(opts, group=group)
    conf.set_default("transport_url", IN_PROCESS_TRANSPORT_URL)
    conf.set_default("control_exchange", "pcisim")
    conf.set_default("executor_thread_pool_size", RPC_HANDLER_THREADS)
    logging.register_options(conf)
    logging.set_defaults(
        default_log_levels=[
            *logging.get_default_log_levels(),
            # kombu warns on every in-process connection that it has no host name.
            "kombu.connection=ERROR",
            "alembic.runtime.migration=WARN",
        ]
    )


def parse_args(argv, conf=CONF, default_config_files=None):
    """Parse the command line and configuration files into ``conf``.

    Raises ``cfg.Error`` subclasses with a message naming the bad value or file.
    """
    register_opts(conf)
    conf(
        argv,
        project="pcisim",
        default_config_files=default_config_files,
    )


def state_path(conf=CONF):
    return os.path.abspath(conf.state_path)


def database_connection(conf=CONF):
    """The database URL to use: ``[database] connection`` or the embedded SQLite file."""
    if conf.database.connection:
        return conf.database.connection
    return "sqlite:///" + os.path.join(state_path(conf), SQLITE_FILE_NAME)
