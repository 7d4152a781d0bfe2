"""The ``pcisim`` command line: servers, PCI devices and hypervisors, over the HTTP API.

    pcisim [--url URL] [-f table|json] server create NAME --pci ALIAS:COUNT [--wait]
    pcisim server list | show ID | delete ID [--wait]
    pcisim pci list [--host H] [--status S] [--type T] [--server ID]
    pcisim pci tree HOST
    pcisim hypervisor list | show ID
    pcisim trace [REQUEST_ID] [--mermaid] [--list] [--file F]

The API's address comes from ``--url``, else ``PCISIM_URL``, else http://127.0.0.1:8774;
its token (``[api] auth_token``) from ``--token``, else ``PCISIM_TOKEN``.
``pcisim trace`` reads what a service started with ``--trace`` recorded (``--file``, else
``PCISIM_TRACE_FILE``, else ./state/trace.jsonl). Errors print one line naming the problem
and exit 1.
"""

import argparse
import json
import os
import sys
import time
import urllib.parse
import uuid

import prettytable

from pcisim import client as api_client
from pcisim import exception, trace, trace_report

SERVER_COLUMNS = ("id", "name", "status", "host", "node")
DEVICE_COLUMNS = (
    "id",
    "address",
    "dev_type",
    "vendor_id",
    "product_id",
    "status",
    "numa_node",
    "server",
)
FLOW_COLUMNS = ("request_id", "began", "by", "messages", "ms")
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
        "--pci", type=_non_empty, metavar="ALIAS:COUNT[,ALIAS:COUNT]", help="PCI devices"
    )
    create.add_argument("--vcpus", type=int, default=1)
    create.add_argument("--memory", type=int, default=512, metavar="MB")
    create.add_argument("--disk", type=int, default=1, metavar="GB")
    create.add_argument("--wait", action="store_true", help="wait until ACTIVE or ERROR")
    create.set_defaults(run=server_create)
    server.add_parser("list", help="list servers", parents=[common]).set_defaults(run=server_list)
    show = server.add_parser("show", help="show a server and its devices", parents=[common])
    show.add_argument("id", type=_server_id)
    show.set_defaults(run=server_show)
    delete = server.add_parser("delete", help="delete a server", parents=[common])
    delete.add_argument("id", type=_server_id)
    delete.add_argument("--wait", action="store_true", help="wait until it is gone")
    delete.set_defaults(run=server_delete)

    pci = subparsers.add_parser("pci", help="PCI devices").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = pci.add_parser("list", help="list devices", parents=[common])
    for name in ("host", "status", "type"):
        listing.add_argument(f"--{name}")
    listing.add_argument("--server", type=_server_id)
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
    show.add_argument("id", type=_node_id)
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


def _options_after_the_command():
    """--url and -f accepted after the command too, overriding those given before."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", type=_api_url, default=argparse.SUPPRESS, help="the pcisim API")
    common.add_argument("--token", default=argparse.SUPPRESS, help="the API's token")
    common.add_argument("-f", "--format", choices=("table", "json"), default=argparse.SUPPRESS)
    return common


def add_global_options(parser):
    parser.add_argument(
        "--url",
        type=_api_url,
        default=os.environ.get("PCISIM_URL", api_client.DEFAULT_URL),
        help="the pcisim API (default: $PCISIM_URL or %(default)s)",
    )
    # NOTE: the help never shows the default: it would print the token.
    parser.add_argument(
        "--token",
        default=os.environ.get("PCISIM_TOKEN"),
        help="the API's [api] auth_token, sent as X-Auth-Token (default: $PCISIM_TOKEN)",
    )
    parser.add_argument("-f", "--format", choices=("table", "json"), default="table")


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


def _server_id(text):
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a server id (a UUID)") from None


def _node_id(text):
    if not (text.isascii() and text.isdigit()) or int(text) > 2**31 - 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a hypervisor id (a number)")
    return int(text)


def _non_empty(text):
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty")
    return text


# ------------------------------------------------------------------ output


def _table(rows, columns):
    table = prettytable.PrettyTable(columns)
    table.align = "l"
    for row in rows:
        table.add_row(["" if row.get(c) is None else row.get(c) for c in columns])
    return table


def _show(args, value, columns=None):
    if args.format == "json":
        print(json.dumps(value, indent=2))
    elif isinstance(value, list):
        print(_table(value, columns))
    else:
        table = prettytable.PrettyTable(["Field", "Value"])
        table.align = "l"
        for key, item in value.items():
            table.add_row([key, _cell(key, item)])
        print(table)


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
        server = _wait_for_server(client, server["id"])
    _show(args, server)
    return 1 if server["status"] == "ERROR" else 0


def server_list(args, client):
    _show(args, client.request("GET", "/servers")["servers"], SERVER_COLUMNS)


def server_show(args, client):
    _show(args, client.request("GET", f"/servers/{args.id}")["server"])


def server_delete(args, client):
    client.request("DELETE", f"/servers/{args.id}")
    if args.wait:
        _wait_gone(client, f"/servers/{args.id}")


def pci_list(args, client):
    query = {"host": args.host, "status": args.status, "dev_type": args.type, "server": args.server}
    _show(args, client.request("GET", "/pci-devices", query=query)["pci_devices"], DEVICE_COLUMNS)


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
    _show(args, client.request("GET", f"/hypervisors/{args.id}")["hypervisor"])


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


def _wait_for_server(client, server_id, timeout=120.0):
    deadline = time.monotonic() + timeout
    while (server := client.request("GET", f"/servers/{server_id}")["server"])["status"] == "BUILD":
        if time.monotonic() > deadline:
            raise TimeoutError(f"server {server_id} still building after {timeout:.0f} s")
        time.sleep(0.2)
    return server


def _wait_gone(client, path, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.request("GET", path)
        except api_client.ApiError as error:
            if error.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} still there after {timeout:.0f} s")
        time.sleep(0.2)


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
        TimeoutError,
        exception.TraceUnavailable,
        exception.FlowNotFound,
    ) as error:
        print(f"pcisim: {error}", file=sys.stderr)
        return 1


def parser():
    top = argparse.ArgumentParser(
        prog="pcisim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_global_options(top)
    subparsers = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subparsers.add_parser(
        "up", help="run the all-in-one control plane (see: pcisim up --help)", add_help=False
    )
    add_parsers(subparsers)
    return top
