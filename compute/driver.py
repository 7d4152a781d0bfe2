"""The simulated hypervisor: compute nodes made of inventories, with guests on them.

``SimulatedDriver`` plays the part of Nova's virt driver for the compute service. It
reports each node's resources and PCI devices in the hypervisor report format the PCI
tracker consumes, lets tests and operators hot-plug and hot-unplug devices (by the
Python API, or by editing an inventory file and calling `SimulatedDriver.reload`), and
keeps the guests it was asked to run, so that the compute can compare them with the
database after a crash.
"""

import dataclasses
import threading

from pcisim import exception
from pcisim.compute.inventory import (
    SHORT_FORM_KEYS,
    Where,
    check_node_name,
    load_nodes,
    short_form_inventory,
)
from pcisim.pci.address import PciAddress


@dataclasses.dataclass(frozen=True)
class InventorySource:
    """One ``[compute] inventory`` value and the nodes it describes.

    ``NAME=PATH`` names the node of a single-node file, ``NAME=SHORT_FORM`` generates
    one (the text after ``NAME=`` holds an ``=``), and a bare ``PATH`` is a multi-node
    file. `load` reads a file anew each time it is called.
    """

    value: str
    nodename: str | None
    spec: str

    @classmethod
    def parse(cls, value):
        name, equals, spec = (part.strip() for part in value.partition("="))
        if not equals:
            return cls(value, None, value.strip())
        where = Where(repr(value))
        if name in SHORT_FORM_KEYS:
            raise where.error(f"a short form needs a node name: NAME={value}")
        check_node_name(name, where)
        if not spec:
            raise where.error(f"nothing follows {name}=")
        return cls(value, name, spec)

    @property
    def is_file(self):
        return "=" not in self.spec

    def load(self):
        """Node name -> `Inventory`; `InvalidInventory` naming what is wrong."""
        if self.is_file:
            return load_nodes(self.spec, self.nodename)
        where = Where(repr(self.value)).at(f"node {self.nodename!r}")
        return {self.nodename: short_form_inventory(self.spec, where)}


class SimulatedDriver:
    """Simulated compute nodes, each an `Inventory` and the guests running on it.

    Thread-safe: the periodic task and the RPC handlers call it from different
    threads, and one lock makes every call see and leave a consistent state. Nothing
    it returns is shared with it: callers may change what they get.

    Every method given a node name the driver does not have raises
    `ComputeNodeNotFound`.
    """

    def __init__(self, inventories):
        """``inventories`` maps node names to `compute.inventory.Inventory` objects."""
        self._lock = threading.Lock()
        self._inventories = dict(inventories)
        self._guests = {nodename: {} for nodename in inventories}  # node -> uuid -> addresses
        self._file_sources = ()
        self._file_nodes = frozenset()

    @classmethod
    def from_config(cls, values):
        """The driver of ``[compute] inventory`` values (see `InventorySource`).

        Raises `InvalidInventory` for a bad value or file, or a node defined twice.
        """
        sources = [InventorySource.parse(value) for value in values]
        generated = {}
        for source in sources:
            if not source.is_file:
                _add_nodes(generated, source, source.load())
        driver = cls(generated)
        driver._file_sources = tuple(source for source in sources if source.is_file)
        driver.reload()
        return driver

    def reload(self):
        """Read the inventory files again, all or nothing.

        A file's nodes take the file's contents (devices hot-plugged since are gone,
        devices missing from the file are unplugged); a node no file has any more goes
        away with its guests' records, and a new one starts without guests. Nodes of
        short forms or given to the constructor keep their current inventory. If a file
        is bad, `InvalidInventory` is raised and nothing changes.
        """
        loaded = [(source, source.load()) for source in self._file_sources]
        with self._lock:
            inventories = {
                nodename: inventory
                for nodename, inventory in self._inventories.items()
                if nodename not in self._file_nodes
            }
            fixed = set(inventories)
            for source, nodes in loaded:
                _add_nodes(inventories, source, nodes)
            self._inventories = inventories
            self._file_nodes = frozenset(inventories.keys() - fixed)
            self._guests = {nodename: self._guests.get(nodename, {}) for nodename in inventories}

    # ------------------------------------------------------------ resources

    def get_available_nodes(self):
        """The names of the nodes, sorted."""
        with self._lock:
            return sorted(self._inventories)

    def get_available_resource(self, nodename):
        """The node's totals: ``vcpus``, ``memory_mb``, ``local_gb``, ``numa_sockets``
        (NUMA node -> socket) and ``pci_devices`` (the hypervisor report).
        """
        with self._lock:
            inventory = self._inventory(nodename)
        return {
            "vcpus": inventory.vcpus,
            "memory_mb": inventory.memory_mb,
            "local_gb": inventory.local_gb,
            "numa_sockets": dict(inventory.numa_sockets),
            "pci_devices": inventory.report(),
        }

    # ------------------------------------------------------------- hot plug

    def hot_plug(self, nodename, device):
        """Add a device, written as in an inventory file, to a running node.

        It is checked as a file's device is, and refused with `InvalidInventory` if its
        address is taken or it is a VF without its PF on the node. Returns its entry in
        the hypervisor report.
        """
        where = Where(f"of node {nodename!r}").at("hot-plugged device")
        with self._lock:
            inventory, entry = self._inventory(nodename).plugged(device, where)
            self._inventories[nodename] = inventory
        return entry

    def hot_unplug(self, nodename, address):
        """Remove a device from a running node, and with a PF its VFs.

        Guests keep the devices they were given, as when a device fails under a guest.
        Returns the addresses removed; `InvalidInventory` if the node has no such device.
        """
        where = Where(f"of node {nodename!r}").at("hot-unplug")
        with self._lock:
            inventory, removed = self._inventory(nodename).unplugged(address, where)
            self._inventories[nodename] = inventory
        return removed

    # --------------------------------------------------------------- guests

    def spawn(self, nodename, instance_uuid, pci_addresses=()):
        """Start a guest with the given PCI devices passed through to it.

        Refused with `InstanceExists` if the guest runs already, `InvalidInput` for an
        address the node does not have, and `Conflict` for a device another guest has:
        a device is never given to two guests.
        """
        addresses = tuple(str(PciAddress.parse(address)) for address in pci_addresses)
        with self._lock:
            inventory, guests = self._inventory(nodename), self._guests[nodename]
            if instance_uuid in guests:
                raise exception.InstanceExists(instance_uuid=instance_uuid)
            for address in addresses:
                _check_passthrough(nodename, address, inventory, guests)
            guests[instance_uuid] = addresses

    def destroy(self, nodename, instance_uuid):
        """Stop a guest and release its devices; nothing happens if it does not run."""
        with self._lock:
            self._inventory(nodename)
            self._guests[nodename].pop(instance_uuid, None)

    def list_instances(self, nodename):
        """The uuids of the guests running on the node."""
        with self._lock:
            self._inventory(nodename)
            return set(self._guests[nodename])

    def _inventory(self, nodename):
        """The node's inventory; the caller holds the lock."""
        try:
            return self._inventories[nodename]
        except KeyError:
            raise exception.ComputeNodeNotFound(node_id=nodename) from None


def _add_nodes(inventories, source, nodes):
    """Add a source's nodes to ``inventories``, refusing a name already there."""
    for nodename in nodes:
        if nodename in inventories:
            raise exception.InvalidInventory(
                source=repr(source.value),
                reason=f"node {nodename!r} is defined twice in [compute] inventory",
            )
    inventories.update(nodes)


def _check_passthrough(nodename, address, inventory, guests):
    if address not in inventory.devices:
        raise exception.InvalidInput(reason=f"node {nodename} has no PCI device {address}")
    for holder, addresses in guests.items():
        if address in addresses:
            raise exception.Conflict(
                reason=f"PCI device {nodename}:{address} is passed through to guest {holder}"
            )
