"""Compute nodes: a hypervisor's resources, what is used of them, and its PCI pools."""

from oslo_utils import versionutils

from pcisim.db import allocations as db_allocations
from pcisim.db import api as db_api
from pcisim.db import engine as db_engine
from pcisim.objects import base, fields
from pcisim.objects.pci_device import PciDeviceList
from pcisim.objects.pci_device_pool import PciDevicePoolList

# NOTE: pool lists are stored as JSON text in columns of other names.
POOL_COLUMNS = {"pci_device_pools": "pci_stats", "pci_inventory": "pci_inventory"}


@base.PcisimObjectRegistry.register
class ComputeNode(base.PcisimPersistentObject, base.PcisimObject):
    """One hypervisor node, managed by the compute service on ``host``."""

    # Version 1.0: initial version
    # Version 1.1: added pci_device_pools
    # Version 1.2: added pci_inventory, PciDevicePoolList 1.1, heal_allocations
    # Version 1.3: added save_with_devices (a conductor serves it from 1.3 on; as
    #              ever, conductors are upgraded before computes)
    # Version 1.4: PciDevicePoolList 1.2 (the node's NUMA sockets, for the scheduler)
    # Version 1.5: save_with_devices takes and answers compact changes, as
    #              PciDeviceList 1.4's save_batch (a device list still answered with
    #              devices, for 1.4 and older callers), and releases the allocations
    #              of the instances whose devices it frees (Instance 1.3 no longer
    #              releases them)
    VERSION = "1.5"

    fields = {
        "id": fields.IntegerField(),
        "uuid": fields.UUIDField(),
        "host": fields.StringField(),
        "hypervisor_hostname": fields.StringField(),
        "vcpus": fields.IntegerField(),
        "memory_mb": fields.IntegerField(),
        "local_gb": fields.IntegerField(),
        "vcpus_used": fields.IntegerField(default=0),
        "memory_mb_used": fields.IntegerField(default=0),
        "local_gb_used": fields.IntegerField(default=0),
        "pci_device_pools": fields.ObjectField("PciDevicePoolList", nullable=True),
        "pci_inventory": fields.ObjectField("PciDevicePoolList", nullable=True),
        **base.PcisimPersistentObject.fields,
    }
    obj_sent_for = {"save": ("id",), "save_with_devices": ("id",)}
    obj_relationships = {
        "pci_device_pools": [("1.1", "1.0"), ("1.2", "1.1"), ("1.4", "1.2")],
        "pci_inventory": [("1.2", "1.1"), ("1.4", "1.2")],
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        version = versionutils.convert_version_to_tuple(target_version)
        if version < (1, 2):
            primitive.pop("pci_inventory", None)
        if version < (1, 1):
            primitive.pop("pci_device_pools", None)

    @classmethod
    def _from_db_object(cls, context, node, row):
        node._copy_row(row, skip=POOL_COLUMNS.keys())
        for field, column in POOL_COLUMNS.items():
            setattr(node, field, PciDevicePoolList.from_json(getattr(row, column)))
        node._context = context
        node.obj_reset_changes(recursive=True)
        return node

    def _db_values(self, names):
        values = super()._db_values(names)
        for field, column in POOL_COLUMNS.items():
            if field in values:
                pools = values.pop(field)
                values[column] = pools.to_json() if pools is not None else None
        return values

    @classmethod
    @base.remotable
    def get_by_id(cls, context, node_id):
        """A live compute node by id; ``ComputeNodeNotFound`` if none."""
        return cls._from_db_object(context, cls(), db_api.compute_node_get(context, node_id))

    @classmethod
    @base.remotable
    def get_by_host_and_nodename(cls, context, host, nodename):
        """A host's live node by name; ``ComputeHostNotFound`` if none."""
        row = db_api.compute_node_get_by_host_and_nodename(context, host, nodename)
        return cls._from_db_object(context, cls(), row)

    @base.remotable
    def create(self):
        """Insert this node; ``ComputeNodeExists`` when host and name are taken."""
        row = db_api.compute_node_create(self._context, self._db_values(self._set_field_names()))
        self._from_db_object(self._context, self, row)

    @base.remotable
    def save(self):
        """Write pending changes (resource usage, pools) to the node's row."""
        self.write_changes()
        self.obj_reset_changes(recursive=True)

    def write_changes(self):
        """Write the pending changes, leaving them pending (a retried transaction
        writes them again); the time written, None when nothing was pending."""
        values = self._db_values(self.obj_what_changed())
        if not values:
            return None
        self.updated_at = db_api.compute_node_update(self._context, self.id, values)
        return self.updated_at

    def adopt_save(self, at):
        """Take the outcome of a save of this node's pending changes made by another
        object's call (``Instance.save_with_devices``): written at ``at``, nothing
        pending."""
        self.updated_at = at
        self.obj_reset_changes(recursive=True)

    @base.remotable
    def save_with_devices(self, changes, expected=None, released=None):
        """Write the node's pending changes and the device ``changes`` of this node
        (as ``PciDeviceList.save_batch`` takes them) in one transaction: one round trip
        for a claim or a free.

        ``released`` names the instances whose devices this write frees: their
        allocations on this node end in the same transaction, so the scheduler never
        counts a device free that its compute still holds.

        Answers as ``PciDeviceList.save_batch`` does (the devices as stored when
        ``changes`` is a PciDeviceList, from a caller of ComputeNode 1.4 or older), and
        raises as it does; on ``PciDeviceConflict`` nothing at all is written. A
        transaction the database rolls back for a deadlock or a lock wait is run again
        whole.
        """

        def write():
            answer = PciDeviceList.save_batch(self._context, self.id, changes, expected)
            self.write_changes()
            if released:
                db_allocations.release_on_node(self._context, self.id, released)
            return answer

        answer = db_engine.retried_write_transaction(self._context, write)
        self.obj_reset_changes(recursive=True)
        return answer

    @base.remotable
    def destroy(self):
        """Soft-delete the node and its devices."""
        row = db_api.compute_node_delete(self._context, self.id)
        self._from_db_object(self._context, self, row)

    @base.remotable
    def heal_allocations(self, held):
        """Make the node's allocations agree with the instances its compute holds.

        ``held`` maps each instance the compute holds on this node to what it uses
        ({resource: used}). An instance that has no allocation here gets one of that
        (if it is live, on this node and not in ERROR); an allocation whose consumer
        is not such an instance is removed. Returns {"added": [uuids], "removed":
        [uuids]}.
        """
        return db_allocations.heal(self._context, self.id, held)


@base.PcisimObjectRegistry.register
class ComputeNodeList(base.ObjectListBase, base.PcisimObject):
    # Version 1.0: ComputeNode 1.0
    # Version 1.1: ComputeNode 1.1
    # Version 1.2: ComputeNode 1.2
    # Version 1.3: ComputeNode 1.3
    # Version 1.4: ComputeNode 1.4
    # Version 1.5: ComputeNode 1.5
    VERSION = "1.5"

    fields = {"objects": fields.ListOfObjectsField("ComputeNode")}
    obj_relationships = {
        "objects": [
            ("1.0", "1.0"),
            ("1.1", "1.1"),
            ("1.2", "1.2"),
            ("1.3", "1.3"),
            ("1.4", "1.4"),
            ("1.5", "1.5"),
        ]
    }

    @classmethod
    @base.remotable
    def get_all(cls, context):
        """Every live compute node."""
        rows = db_api.compute_node_get_all(context)
        return base.obj_make_list(context, cls(context), rows)

    @classmethod
    @base.remotable
    def get_all_by_host(cls, context, host):
        """The live nodes of a host; ``ComputeHostNotFound`` when it has none."""
        rows = db_api.compute_node_get_all_by_host(context, host)
        return base.obj_make_list(context, cls(context), rows)
