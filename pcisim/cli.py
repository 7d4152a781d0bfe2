"""The ``pcisim`` command line: servers, PCI devices and hypervisors, over the HTTP API.

Only what an HTTP client needs is imported here; ``pcisim up`` loads the services
when it runs.
"""

import argparse
import json
import os
import sys
import urllib.parse
import uuid

from pcisim import client as api_client
from pcisim import exception, polling, table, trace, trace_report

SERVER_COLUMNS = ("id", "name", "status", "host", "node")
DEVICE_COLUMNS = (
    "id",
    "host",
    "address",
    "dev_type",
    "vendor_id",
    "product_id",
    "status",
    "numa_node",
    "server",
)
FLOW_COLUMNS = ("request_id", "began", "by", "messages", "ms")
DESCRIPTION = """\
pcisim up                                   the all-in-one control plane (pcisim up --help)
pcisim server create NAME [--pci ALIAS:COUNT] [--wait [SECONDS]]
pcisim server list | show SERVER | delete SERVER [--wait [SECONDS]]
pcisim pci list [--host H] [--status S] [--type T] [--server SERVER]
pcisim pci tree HOST
pcisim hypervisor list | show HYPERVISOR
pcisim trace [REQUEST_ID] [--mermaid] [--list] [--file F]

SERVER is a server's id or its name; HYPERVISOR a hypervisor's id or its name.
The API's address comes from --url, else $PCISIM_URL, else http://127.0.0.1:8774; its
token ([api] auth_token) from --token, else $PCISIM_TOKEN. Exit codes: 0 done, 1 the
API or the trace refused or failed (one line says why), 2 a command line argparse
refused."""
# NOTE: pcisim up's own aliases; an API configured otherwise lists its own in errors.
UP_ALIASES = "gpu (10de:1eb8), vf (8086:1520 VF), pf (8086:1521 PF)"
DEFAULT_WAIT_SECONDS = 120.0
MAX_ID = 2**31 - 1
HYPERVISOR_COLUMNS = (
    "id",
    "host",
    "hypervisor_hostname",
    "vcpus",
    "vcpus_used",
    "memory_mb",
    "memory_mb_used",
)


def add_parsers(subparsers):
    common = _options_after_the_command()
    server = subparsers.add_parser("server", help="servers").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = server.add_parser("create", help="boot a server", parents=[common])
    create.add_argument("name")
    create.add_argument(
        "--pci",
        type=_non_empty,
        metavar="ALIAS:COUNT[,ALIAS:COUNT]",
        help=f"PCI devices by the API's [pci] alias names; pcisim up defines {UP_ALIASES}",
    )
    create.add_argument("--vcpus", type=int, default=1, help="(default: %(default)s)")
    create.add_argument(
        "--memory", type=int, default=512, metavar="MB", help="(default: %(default)s)"
    )
    create.add_argument("--disk", type=int, default=1, metavar="GB", help="(default: %(default)s)")
    _add_wait(create, "until ACTIVE or ERROR")
    create.set_defaults(run=server_create)
    server.add_parser("list", help="list servers", parents=[common]).set_defaults(run=server_list)
    show = server.add_parser("show", help="show a server and its devices", parents=[common])
    show.add_argument("server", metavar="SERVER", help="id or name")
    show.set_defaults(run=server_show)
    delete = server.add_parser("delete", help="delete a server", parents=[common])
    delete.add_argument("server", metavar="SERVER", help="id or name")
    _add_wait(delete, "until it is gone")
    delete.set_defaults(run=server_delete)

    pci = subparsers.add_parser("pci", help="PCI devices").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = pci.add_parser("list", help="list devices", parents=[common])
    for name in ("host", "status", "type"):
        listing.add_argument(f"--{name}")
    listing.add_argument("--server", metavar="SERVER", help="id or name")
    listing.set_defaults(run=pci_list)
    tree = pci.add_parser("tree", help="a host's PFs with their VFs", parents=[common])
    tree.add_argument("host")
    tree.set_defaults(run=pci_tree)

    hypervisor = subparsers.add_parser("hypervisor", help="compute nodes").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    hypervisor.add_parser("list", help="list nodes", parents=[common]).set_defaults(
        run=hypervisor_list
    )
    show = hypervisor.add_parser(
        "show", help="show a node, its usage and PCI pools", parents=[common]
    )
    show.add_argument("hypervisor", metavar="HYPERVISOR", help="id or hypervisor_hostname")
    show.set_defaults(run=hypervisor_show)

    flow = subparsers.add_parser(
        "trace", help="the last flow recorded by --trace, or the one named", parents=[common]
    )
    flow.add_argument("request_id", nargs="?", metavar="REQUEST_ID", help="or a unique prefix")
    flow.add_argument("--mermaid", action="store_true", help="as a Mermaid sequence diagram")
    flow.add_argument("--list", action="store_true", help="list the recorded flows")
    flow.add_argument(
        "--file",
        default=os.environ.get("PCISIM_TRACE_FILE", trace.DEFAULT_FILE),
        help="the trace (default: $PCISIM_TRACE_FILE or %(default)s)",
    )
    flow.set_defaults(run=show_trace)


def _add_wait(parser, until):
    parser.add_argument(
        "--wait",
        nargs="?",
        type=_seconds,
        const=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"wait {until}, at most SECONDS (default {DEFAULT_WAIT_SECONDS:g})",
    )


def _options_after_the_command():
    """--url, --token and -f accepted after the command too, overriding those before."""
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, defaults=False)
    return common


def add_global_options(parser, defaults=True):
    """The API's address and token and the output format, declared once for before and
    after the command; ``defaults=False`` leaves unset what is not given."""

    def default(value):
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url",
        type=_api_url,
        default=default(os.environ.get("PCISIM_URL", api_client.DEFAULT_URL)),
        help=f"the pcisim API (default: $PCISIM_URL or {api_client.DEFAULT_URL})",
    )
    # NOTE: the help never shows the default: it would print the token.
    parser.add_argument(
        "--token",
        default=default(os.environ.get("PCISIM_TOKEN")),
        help="the API's [api] auth_token, sent as X-Auth-Token (default: $PCISIM_TOKEN)",
    )
    parser.add_argument(
        "-f", "--format", choices=("table", "json"), default=default("table"), help="output"
    )


# ------------------------------------------------------------ argument types


def _api_url(text):
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL")
    return text


def _seconds(text):
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 10**6:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 to 1e6)")
    return seconds


def _non_empty(text):
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty")
    return text


# ------------------------------------------------------------------ output


def _show(args, value, columns=None):
    if args.format == "json":
        print(json.dumps(value, indent=2))
    elif isinstance(value, list):
        print(table.render(columns, ([row.get(c) for c in columns] for row in value)))
    else:
        fields = ((key, _cell(key, item)) for key, item in value.items())
        print(table.render(["Field", "Value"], fields))


def _cell(key, value):
    if key == "pci_devices":
        return "\n".join(
            f"{d['address']} {d['dev_type']} {d['vendor_id']}:{d['product_id']} {d['status']}"
            for d in value
        )
    if key == "fault":
        return value["message"]
    if key == "pci_pools":
        return "\n".join(
            f"{p['vendor_id']}:{p['product_id']} {p['dev_type']} numa "
            f"{p['numa_node']}: {p['count']} free"
            for p in value
        )
    return json.dumps(value) if isinstance(value, list | dict) else value


# ---------------------------------------------------------------- commands


def server_create(args, client):
    body = {"name": args.name, "vcpus": args.vcpus, "memory_mb": args.memory, "root_gb": args.disk}
    if args.pci:
        body["pci_requests"] = args.pci
    server = client.request("POST", "/servers", {"server": body})["server"]
    if args.wait:
        server = _wait_for_server(client, server["id"], args.wait)
    _show(args, server)
    return 1 if server["status"] == "ERROR" else 0


def server_list(args, client):
    _show(args, client.request("GET", "/servers")["servers"], SERVER_COLUMNS)


def server_show(args, client):
    _show(args, _server(client, args.server))


def server_delete(args, client):
    server_id = _server(client, args.server)["id"]
    client.request("DELETE", f"/servers/{server_id}")
    if args.wait:
        _wait_gone(client, f"/servers/{server_id}", args.wait)
        print(f"Server {server_id} deleted.")
    else:
        print(f"Server {server_id} is being deleted.")


def _server(client, id_or_name):
    """The server whose id, else whose only name, is ``id_or_name``."""
    if _is_uuid(id_or_name):
        return client.request("GET", f"/servers/{id_or_name}")["server"]
    named = [s for s in client.request("GET", "/servers")["servers"] if s["name"] == id_or_name]
    if len(named) > 1:
        raise NotUnique("server", id_or_name, [s["id"] for s in named])
    if not named:
        raise api_client.ApiError(404, "server.not_found", f"no server {id_or_name!r}")
    return client.request("GET", f"/servers/{named[0]['id']}")["server"]


def _is_uuid(text):
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


class NotUnique(Exception):
    def __init__(self, kind, name, ids):
        super().__init__(
            f"more than one {kind} is named {name!r} ({', '.join(map(str, ids))}): give its id"
        )


def pci_list(args, client):
    server = _server(client, args.server)["id"] if args.server else None
    query = {"host": args.host, "status": args.status, "dev_type": args.type, "server": server}
    devices = client.request("GET", "/pci-devices", query=query)["pci_devices"]
    if args.format == "table":
        hosts = {n["id"]: n["host"] for n in client.request("GET", "/hypervisors")["hypervisors"]}
        devices = [{**d, "host": hosts.get(d["compute_node_id"])} for d in devices]
    _show(args, devices, DEVICE_COLUMNS)


def pci_tree(args, client):
    node_ids = [
        n["id"]
        for n in client.request("GET", "/hypervisors")["hypervisors"]
        if args.host in (n["host"], n["hypervisor_hostname"])
    ]
    if not node_ids:
        raise api_client.ApiError(404, "hypervisor.not_found", f"no hypervisor {args.host!r}")
    trees = [client.request("GET", f"/hypervisors/{n}/pci-tree") for n in node_ids]
    if args.format == "json":
        print(json.dumps(trees, indent=2))
        return
    for tree in trees:
        print(f"{tree['host']}/{tree['hypervisor_hostname']}")
        for pf in tree["pfs"]:
            print(f"  {_line(pf)}")
            for vf in pf["vfs"]:
                print(f"    {_line(vf)}")
        for device in tree["devices"]:
            print(f"  {_line(device)}")


def _line(device):
    holder = f"  -> {device['server']}" if device["server"] else ""
    return (
        f"{device['address']}  {device['dev_type']:<8} {device['vendor_id']}:"
        f"{device['product_id']}  {device['status']}{holder}"
    )


def hypervisor_list(args, client):
    _show(args, client.request("GET", "/hypervisors")["hypervisors"], HYPERVISOR_COLUMNS)


def hypervisor_show(args, client):
    _show(
        args,
        client.request("GET", f"/hypervisors/{_hypervisor_id(client, args.hypervisor)}")[
            "hypervisor"
        ],
    )


def _hypervisor_id(client, id_or_name):
    """The id of the hypervisor whose id, else whose only hypervisor_hostname, is given."""
    if id_or_name.isascii() and id_or_name.isdigit() and int(id_or_name) <= MAX_ID:
        return int(id_or_name)
    nodes = client.request("GET", "/hypervisors")["hypervisors"]
    named = [n["id"] for n in nodes if n["hypervisor_hostname"] == id_or_name]
    if len(named) > 1:
        raise NotUnique("hypervisor", id_or_name, named)
    if not named:
        raise api_client.ApiError(404, "hypervisor.not_found", f"no hypervisor {id_or_name!r}")
    return named[0]


def show_trace(args, client):
    records, unreadable = trace_report.read(args.file)
    if unreadable:
        print(f"pcisim: skipped {unreadable} unreadable lines of {args.file}", file=sys.stderr)
    flows = trace_report.flows(records)
    if args.list:
        _show(args, [trace_report.summary(f) for f in flows.values()], FLOW_COLUMNS)
        return
    flow = trace_report.pick(flows, args.file, args.request_id)
    if args.format == "json":
        print(json.dumps(flow, indent=2))
    else:
        print(trace_report.mermaid(flow) if args.mermaid else trace_report.text(flow))


def _wait_for_server(client, server_id, timeout):
    def built():
        server = client.request("GET", f"/servers/{server_id}")["server"]
        return server if server["status"] != "BUILD" else None

    return polling.wait_until(built, timeout, f"server {server_id} to build", interval=0.2)


def _wait_gone(client, path, timeout):
    def gone():
        try:
            client.request("GET", path)
        except api_client.ApiError as error:
            if error.status == 404:
                return True
            raise
        return False

    polling.wait_until(gone, timeout, f"{path} to be gone", interval=0.2)


def run_up(args, client):
    """The all-in-one control plane, with its own options (oslo.config's)."""
    from pcisim.cmd import up

    return up.main(args.up_args)


def run(args):
    """Run the parsed command; returns the exit code."""
    client = api_client.Client(args.url, token=args.token)
    try:
        return args.run(args, client) or 0
    except api_client.ApiError as error:
        hint = "; give the API's token with --token or PCISIM_TOKEN" if error.status == 401 else ""
        print(f"pcisim: {error}{hint}", file=sys.stderr)
        return 1
    except (
        api_client.Unreachable,
        NotUnique,
        TimeoutError,
        exception.TraceUnavailable,
        exception.FlowNotFound,
        exception.FlowAmbiguous,
    ) as error:
        print(f"pcisim: {error}", file=sys.stderr)
        return 1


def parse_args(argv):
    """The parsed command line. ``pcisim up``'s own options are oslo.config's: they
    are kept, unparsed, in ``up_args``."""
    top = parser()
    command = _command_index(top, argv)
    if argv[command : command + 1] != ["up"]:
        return top.parse_args(argv)
    args = top.parse_args(argv[: command + 1])
    args.up_args = argv[command + 1 :]
    return args


def _command_index(top, argv):
    """Where the command begins: after the global options and their values."""
    takes_value = {
        option for action in top._actions if action.nargs != 0 for option in action.option_strings
    }
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        index += 2 if argv[index] in takes_value else 1
    return index


def parser():
    top = argparse.ArgumentParser(
        prog="pcisim", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_global_options(top)
    subparsers = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = subparsers.add_parser(
        "up", help="run the all-in-one control plane (see: pcisim up --help)", add_help=False
    )
    up.set_defaults(run=run_up, up_args=[])
    add_parsers(subparsers)
    return top
