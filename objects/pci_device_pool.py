"""Pools: a node's PCI devices counted by kind, as the scheduler sees them: the free
ones (``compute_nodes.pci_stats``), or the whole inventory, per group
(``compute_nodes.pci_inventory``, see ``pci/capacity.py``), with the node's NUMA
layout (which socket each NUMA node is on) that the ``socket`` NUMA policy needs."""

from oslo_serialization import jsonutils
from oslo_utils import versionutils

from pcisim.objects import base, fields


@base.PcisimObjectRegistry.register
class PciDevicePool(base.PcisimObject):
    """How many devices of one kind (vendor, product, NUMA node, type, tags and, in an
    inventory, group: the PF whose counter they share) there are."""

    # Version 1.0: initial version
    # Version 1.1: added group
    VERSION = "1.1"

    fields = {
        "vendor_id": fields.StringField(),
        "product_id": fields.StringField(),
        "numa_node": fields.IntegerField(nullable=True),
        "dev_type": fields.PciDeviceTypeField(),
        "tags": fields.DictOfNullableStringsField(default={}),
        "count": fields.IntegerField(),
        "group": fields.StringField(nullable=True, default=None),
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 1):
            primitive.pop("group", None)

    def to_dict(self):
        return {name: getattr(self, name) for name in self.fields if self.obj_attr_is_set(name)}


@base.PcisimObjectRegistry.register
class PciDevicePoolList(base.ObjectListBase, base.PcisimObject):
    """The pools of one compute node, stored as JSON in ``compute_nodes.pci_stats``
    (and ``pci_inventory``), with ``numa_sockets``: NUMA node (as text, the keys of a
    JSON object) -> socket, or None when the node's layout is unknown."""

    # Version 1.0: PciDevicePool 1.0
    # Version 1.1: PciDevicePool 1.1
    # Version 1.2: added numa_sockets
    VERSION = "1.2"

    fields = {
        "objects": fields.ListOfObjectsField("PciDevicePool"),
        "numa_sockets": fields.DictOfIntegersField(nullable=True, default=None),
    }
    obj_relationships = {"objects": [("1.0", "1.0"), ("1.1", "1.1"), ("1.2", "1.1")]}

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 2):
            primitive.pop("numa_sockets", None)

    @classmethod
    def of(cls, pools, numa_sockets=None):
        """The list of ``pools`` on a node whose NUMA layout is ``numa_sockets``
        ({NUMA node: socket}, or None when unknown)."""
        sockets = None if numa_sockets is None else {str(n): s for n, s in numa_sockets.items()}
        return cls(objects=list(pools), numa_sockets=sockets)

    def socket_map(self):
        """{NUMA node: socket} of the node; {} when its layout is unknown."""
        sockets = self.numa_sockets if self.obj_attr_is_set("numa_sockets") else None
        return {int(node): socket for node, socket in (sockets or {}).items()}

    def to_json(self):
        sockets = self.numa_sockets if self.obj_attr_is_set("numa_sockets") else None
        return jsonutils.dumps(
            {"pools": [pool.to_dict() for pool in self.objects], "numa_sockets": sockets}
        )

    @classmethod
    def from_json(cls, text):
        """The list ``to_json`` wrote; also a bare JSON list of pools, as rows written
        before numa_sockets hold (their layout is unknown)."""
        loaded = jsonutils.loads(text or "[]")
        if isinstance(loaded, list):
            loaded = {"pools": loaded, "numa_sockets": None}
        pools = [PciDevicePool(**values) for values in loaded["pools"]]
        pool_list = cls(objects=pools, numa_sockets=loaded["numa_sockets"])
        pool_list.obj_reset_changes(recursive=True)
        return pool_list
