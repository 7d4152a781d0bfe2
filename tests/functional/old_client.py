"""A compute of the previous release: it knows PciDevice 1.0 (no ``uuid``), nothing newer.

    python -m tests.functional.old_client --config-file F get-by-dev-addr NODE_ID ADDRESS
    python -m tests.functional.old_client --config-file F get-by-compute-node NODE_ID
    python -m tests.functional.old_client --config-file F deserialize < primitive.json

Before it uses any object, this process replaces PciDevice and PciDeviceList in the
global registry of oslo.versionedobjects with their 1.0 versions, so that it genuinely
knows no other: it asks the conductor for objects in those versions, and a newer
primitive it is handed can only be read through ``object_backport_versions``. It then
acts as a compute of the conductor serving the topic of its configuration file, runs
one command, and prints a JSON report of the objects it got.
"""

import argparse
import json
import sys

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before anything else

# isort: split
from oslo_versionedobjects import base as ovo_base

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import dbaccess, objects, rpc
from pcisim.conductor import rpcapi
from pcisim.objects import base as objects_base
from pcisim.objects import fields, pci_device


class PciDevice(pci_device.PciDevice):
    """PciDevice as the previous release shipped it."""

    # Version 1.0: initial version
    VERSION = "1.0"

    fields = {name: field for name, field in pci_device.PciDevice.fields.items() if name != "uuid"}


class PciDeviceList(pci_device.PciDeviceList):
    """PciDeviceList as the previous release shipped it."""

    # Version 1.0: PciDevice 1.0
    VERSION = "1.0"

    fields = {"objects": fields.ListOfObjectsField("PciDevice")}
    obj_relationships = {"objects": [("1.0", "1.0")]}


def install_old_versions():
    """Make the 1.0 classes the only PciDevice and PciDeviceList this process knows.

    NOTE: the classes are put in the registry directly rather than registered:
    registering merges the fields of the base classes back in, ``uuid`` included.
    """
    objects.register_all()
    registry = ovo_base.VersionedObjectRegistry.obj_classes()
    registry["PciDevice"] = [PciDevice]
    registry["PciDeviceList"] = [PciDeviceList]


def act_as_compute(config_file):
    """Send remotable calls to the conductor of ``config_file``; return the transport."""
    pcisim_conf.parse_args(["--config-file", config_file], default_config_files=[])
    transport = rpc.get_transport()
    objects_base.set_indirection_api(rpcapi.ConductorAPI(transport))
    dbaccess.forbid("old-compute")
    return transport


def describe(obj):
    """What a test needs to know of an object this process holds."""
    report = {
        "name": obj.obj_name(),
        "version": obj.VERSION,
        "class": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "fields": sorted(obj.fields),
    }
    if isinstance(obj, ovo_base.ObjectListBase):
        report["objects"] = [describe(item) for item in obj]
    else:
        report["data"] = obj.obj_to_primitive()[f"{obj.OBJ_SERIAL_NAMESPACE}.data"]
    return report


def _parser():
    parser = argparse.ArgumentParser(prog="old_client")
    parser.add_argument("--config-file", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    by_addr = commands.add_parser("get-by-dev-addr")
    by_addr.add_argument("node_id", type=int)
    by_addr.add_argument("address")
    by_node = commands.add_parser("get-by-compute-node")
    by_node.add_argument("node_id", type=int)
    commands.add_parser("deserialize", help="read an object primitive as JSON on stdin")
    return parser


def run(args):
    ctxt = pcisim_context.get_admin_context()
    if args.command == "get-by-dev-addr":
        return PciDevice.get_by_dev_addr(ctxt, args.node_id, args.address)
    if args.command == "get-by-compute-node":
        return PciDeviceList.get_by_compute_node(ctxt, args.node_id)
    # What an RPC server or client of this process does with an object it receives.
    return rpc.RequestContextSerializer().deserialize_entity(ctxt, json.load(sys.stdin))


def main(argv=None):
    args = _parser().parse_args(argv)
    install_old_versions()
    transport = act_as_compute(args.config_file)
    try:
        got = run(args)
    finally:
        transport.cleanup()
    registry = ovo_base.VersionedObjectRegistry.obj_classes()
    known = {name: [c.VERSION for c in registry[name]] for name in ("PciDevice", "PciDeviceList")}
    json.dump({"known_versions": known, "got": describe(got)}, sys.stdout)


if __name__ == "__main__":
    main()
