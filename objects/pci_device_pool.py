"""Pools: a node's free PCI devices counted by kind, as the scheduler sees them."""

from oslo_serialization import jsonutils

from pcisim.objects import base, fields


@base.PcisimObjectRegistry.register
class PciDevicePool(base.PcisimObject):
    """How many devices of one kind (vendor, product, NUMA node, type, tags) are free."""

    # Version 1.0: initial version
    VERSION = "1.0"

    fields = {
        "vendor_id": fields.StringField(),
        "product_id": fields.StringField(),
        "numa_node": fields.IntegerField(nullable=True),
        "dev_type": fields.PciDeviceTypeField(),
        "tags": fields.DictOfNullableStringsField(default={}),
        "count": fields.IntegerField(),
    }

    def to_dict(self):
        return {name: getattr(self, name) for name in self.fields if self.obj_attr_is_set(name)}


@base.PcisimObjectRegistry.register
class PciDevicePoolList(base.ObjectListBase, base.PcisimObject):
    """The pools of one compute node, stored as JSON in ``compute_nodes.pci_stats``."""

    # Version 1.0: PciDevicePool 1.0
    VERSION = "1.0"

    fields = {"objects": fields.ListOfObjectsField("PciDevicePool")}
    obj_relationships = {"objects": [("1.0", "1.0")]}

    def to_json(self):
        return jsonutils.dumps([pool.to_dict() for pool in self.objects])

    @classmethod
    def from_json(cls, text):
        pools = [PciDevicePool(**values) for values in jsonutils.loads(text or "[]")]
        pool_list = cls(objects=pools)
        pool_list.obj_reset_changes(recursive=True)
        return pool_list
