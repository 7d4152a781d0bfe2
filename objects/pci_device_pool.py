"""Pools: a node's PCI devices counted by kind, as the scheduler sees them: the free
ones (``compute_nodes.pci_stats``), or the whole inventory, per group
(``compute_nodes.pci_inventory``, see ``pci/capacity.py``)."""

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
    """The pools of one compute node, stored as JSON in ``compute_nodes.pci_stats``."""

    # Version 1.0: PciDevicePool 1.0
    # Version 1.1: PciDevicePool 1.1
    VERSION = "1.1"

    fields = {"objects": fields.ListOfObjectsField("PciDevicePool")}
    obj_relationships = {"objects": [("1.0", "1.0"), ("1.1", "1.1")]}

    def to_json(self):
        return jsonutils.dumps([pool.to_dict() for pool in self.objects])

    @classmethod
    def from_json(cls, text):
        pools = [PciDevicePool(**values) for values in jsonutils.loads(text or "[]")]
        pool_list = cls(objects=pools)
        pool_list.obj_reset_changes(recursive=True)
        return pool_list
