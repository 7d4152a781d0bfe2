"""A compute of an older release: it knows PciDevice 1.0 (no ``uuid``), nothing newer.

    python -m tests.functional.old_client --config-file F get-by-dev-addr NODE_ID ADDRESS
    python -m tests.functional.old_client --config-file F get-by-compute-node NODE_ID
    python -m tests.functional.old_client --config-file F deserialize < primitive.json
    python -m tests.functional.old_client --config-file F create NODE_ID ADDRESS...
    python -m tests.functional.old_client --config-file F claim INSTANCE < devices.json

``create`` and ``claim`` save devices as computes did before PciDeviceList 1.4: the
whole devices travel to ``save_batch``, which answers with them as stored.

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

    def save(self):
        """Save as computes did before PciDeviceList 1.4: send the changed devices
        whole and take the stored copies the conductor answers with; the addresses
        it left out (rows gone)."""
        pending = PciDeviceList(
            self._context, objects=[device for device in self if device.needs_write()]
        )
        node_id = pending[0].compute_node_id
        stored = {d.address: d for d in self.save_batch(self._context, node_id, pending)}
        for device in pending:
            if device.address in stored:
                for name in ("id", "created_at", "updated_at", "deleted_at", "deleted", "status"):
                    setattr(device, name, getattr(stored[device.address], name))
                device.obj_reset_changes()
        return sorted(device.address for device in pending if device.address not in stored)


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
        "changed": sorted(obj.obj_what_changed()),
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
    create = commands.add_parser("create", help="create type-PCI devices, saved as a list")
    create.add_argument("node_id", type=int)
    create.add_argument("addresses", nargs="+")
    claim = commands.add_parser(
        "claim", help="claim the devices of a device list read as JSON on stdin, saved as a list"
    )
    claim.add_argument("instance_uuid")
    return parser


def _new_device(ctxt, node_id, address):
    return PciDevice(
        ctxt,
        compute_node_id=node_id,
        address=address,
        vendor_id="10de",
        product_id="1eb8",
        dev_type="type-PCI",
        status="available",
        label="label_10de_1eb8",
        instance_uuid=None,
        request_id=None,
    )


def _deserialized(ctxt, primitive):
    """What an RPC server or client of this process does with an object it receives."""
    return rpc.RequestContextSerializer().deserialize_entity(ctxt, primitive)


def _claimed(ctxt, instance_uuid):
    """The devices of the list on stdin (as this compute last read them), claimed."""
    devices = _deserialized(ctxt, json.load(sys.stdin))
    for device in devices:
        device.status, device.instance_uuid = "claimed", instance_uuid
    return devices


def run(args):
    """The report of one command: the object it got, and for a save what was missing."""
    ctxt = pcisim_context.get_admin_context()
    if args.command == "get-by-dev-addr":
        return {"got": describe(PciDevice.get_by_dev_addr(ctxt, args.node_id, args.address))}
    if args.command == "get-by-compute-node":
        return {"got": describe(PciDeviceList.get_by_compute_node(ctxt, args.node_id))}
    if args.command == "create":
        new = [_new_device(ctxt, args.node_id, address) for address in args.addresses]
        devices = PciDeviceList(ctxt, objects=new)
    elif args.command == "claim":
        devices = _claimed(ctxt, args.instance_uuid)
    else:
        return {"got": describe(_deserialized(ctxt, json.load(sys.stdin)))}
    missing = devices.save()
    return {"got": describe(devices), "missing": missing}


def main(argv=None):
    args = _parser().parse_args(argv)
    install_old_versions()
    transport = act_as_compute(args.config_file)
    try:
        report = run(args)
    finally:
        transport.cleanup()
    registry = ovo_base.VersionedObjectRegistry.obj_classes()
    known = {name: [c.VERSION for c in registry[name]] for name in ("PciDevice", "PciDeviceList")}
    json.dump({"known_versions": known, **report}, sys.stdout)


if __name__ == "__main__":
    main()
