"""Instances (servers): where they run, their state, and the PCI devices they use."""

from oslo_utils import versionutils

from pcisim import exception
from pcisim.db import api as db_api
from pcisim.db import engine as db_engine
from pcisim.objects import base, fields
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance_fault import InstanceFault
from pcisim.objects.instance_pci_requests import InstancePCIRequests
from pcisim.objects.pci_device import PciDeviceList

LAZY_ATTRS = ("pci_requests", "pci_devices", "flavor")


@base.PcisimObjectRegistry.register
class Instance(base.PcisimPersistentObject, base.PcisimObject):
    """A server. ``pci_requests``, ``pci_devices`` and ``flavor`` (the copy of the
    flavor it was built from, None when it was built from sizes given one by one) load
    on first access."""

    # Version 1.0: initial version
    # Version 1.1: PciDeviceList 1.2
    # Version 1.2: PciDeviceList 1.3
    # Version 1.3: PciDeviceList 1.4; destroy and a save to ERROR leave the
    #              allocations to the compute, which releases them as it frees the
    #              devices (ComputeNode 1.5)
    # Version 1.4: added flavor and image_ref
    # Version 1.5: added save_with_devices (a conductor serves it from 1.5 on; as
    #              ever, conductors are upgraded before computes)
    # Version 1.6: save_with_devices also writes its compute node's pending changes
    #              (a build's claim travels with its allocation)
    VERSION = "1.6"

    fields = {
        "id": fields.IntegerField(),
        "uuid": fields.UUIDField(),
        "display_name": fields.StringField(nullable=True),
        "project_id": fields.StringField(nullable=True),
        "user_id": fields.StringField(nullable=True),
        "host": fields.StringField(nullable=True),
        "node": fields.StringField(nullable=True),
        "vm_state": fields.StringField(nullable=True),
        "task_state": fields.StringField(nullable=True),
        "vcpus": fields.IntegerField(nullable=True),
        "memory_mb": fields.IntegerField(nullable=True),
        "root_gb": fields.IntegerField(nullable=True),
        "image_ref": fields.StringField(nullable=True),
        "launched_at": fields.DateTimeField(nullable=True),
        "terminated_at": fields.DateTimeField(nullable=True),
        "pci_requests": fields.ObjectField("InstancePCIRequests", nullable=True),
        "pci_devices": fields.ObjectField("PciDeviceList", nullable=True),
        "flavor": fields.ObjectField("Flavor", nullable=True),
        **base.PcisimPersistentObject.fields,
    }
    obj_sent_for = {"save": ("uuid",), "save_with_devices": ("uuid",), "destroy": ("uuid",)}
    obj_relationships = {
        "pci_requests": [("1.0", "1.1")],
        "pci_devices": [("1.0", "1.1"), ("1.1", "1.2"), ("1.2", "1.3"), ("1.3", "1.4")],
        "flavor": [("1.4", "1.0")],
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 4):
            primitive.pop("flavor", None)
            primitive.pop("image_ref", None)

    @classmethod
    def _from_db_object(cls, context, instance, row, expected_attrs=()):
        instance._copy_row(row)
        instance._context = context
        for attr in expected_attrs:
            instance.obj_load_attr(attr)
        instance.obj_reset_changes(recursive=True)
        return instance

    def obj_load_attr(self, attrname):
        """Load ``pci_requests`` or ``pci_devices`` (through the conductor if need be)."""
        if attrname == "pci_requests":
            self.pci_requests = InstancePCIRequests.get_by_instance_uuid(self._context, self.uuid)
        elif attrname == "pci_devices":
            self.pci_devices = PciDeviceList.get_by_instance_uuid(self._context, self.uuid)
        elif attrname == "flavor":
            self.flavor = self.get_flavor(self._context, self.uuid)
        else:
            super().obj_load_attr(attrname)
        self.obj_reset_changes([attrname])

    def _db_values(self, names):
        return super()._db_values([name for name in names if name not in LAZY_ATTRS])

    def _caller_releases_allocations(self):
        """Whether whoever sent this instance releases its allocations itself.

        On the conductor, ``VERSION`` is the one the caller sent. A compute older than
        1.3 frees devices without releasing allocations: its instance's end (a delete,
        ERROR) releases them instead, as it did then.
        """
        return versionutils.convert_version_to_tuple(self.VERSION) >= (1, 3)

    @classmethod
    @base.remotable
    def get_by_uuid(cls, context, uuid, expected_attrs=None):
        """A live instance; ``expected_attrs`` names lazy attributes to load at once."""
        row = db_api.instance_get_by_uuid(context, uuid)
        return cls._from_db_object(context, cls(), row, expected_attrs or ())

    @classmethod
    @base.remotable
    def get_flavor(cls, context, uuid):
        """The copy of the flavor the live instance ``uuid`` was built from, or None."""
        return Flavor.from_json(db_api.instance_extra_get_by_instance_uuid(context, uuid).flavor)

    @base.remotable
    def create(self):
        """Insert the instance with its PCI requests and flavor; ``InstanceExists`` on
        a dup uuid."""
        names = self._set_field_names()
        extra = {}
        if self.obj_attr_is_set("pci_requests") and self.pci_requests is not None:
            extra["pci_requests"] = self.pci_requests.to_json()
        if self.obj_attr_is_set("flavor") and self.flavor is not None:
            extra["flavor"] = self.flavor.to_json()
        row = db_api.instance_create(self._context, self._db_values(names), extra=extra)
        # NOTE: what this instance sent is what was written; the rest comes from the row.
        self._copy_row(row, skip=names)
        self.obj_reset_changes(recursive=True)

    @base.remotable
    def save(self):
        """Write pending changes, including changed PCI requests."""
        changed = self.obj_what_changed()
        values = self._db_values(changed)
        if values:
            self.updated_at = db_api.instance_update(
                self._context,
                self.uuid,
                values,
                release_allocations=not self._caller_releases_allocations(),
            )
        if "pci_requests" in changed and self.pci_requests is not None:
            self.pci_requests.save()
        self.obj_reset_changes(recursive=True)

    @base.remotable
    def save_with_devices(self, node_id, changes, expected=None, node=None):
        """Write the instance's pending changes and the device ``changes`` of compute
        node ``node_id`` (as ``PciDeviceList.save_batch`` takes them) in one
        transaction, with the pending changes of that ``node`` (its usage and pools)
        when given: one round trip for a build's claim, its allocation and its ACTIVE
        state, so that no reader sees one without the others.

        Answers as ``save_batch`` does, with the time the node was written
        (``node_at``) when it was, and raises as it does; on ``PciDeviceConflict``, or
        when the instance or the node is gone (``InstanceNotFound``,
        ``ComputeNodeNotFound``), nothing at all is written. A ``node`` other than
        ``node_id`` is refused (``InvalidInput``). A transaction the database rolls
        back for a deadlock or a lock wait is run again whole (the saves forget their
        pending changes only after their last statement).
        """
        _check_node(node, node_id)

        def write():
            answer = PciDeviceList.save_batch(self._context, node_id, changes, expected)
            written = None if node is None else node.write_changes()
            if written is not None:
                answer["node_at"] = written.isoformat()
            self.save()
            return answer

        return db_engine.retried_write_transaction(self._context, write)

    def mark_error(self, error, host=None):
        """Put the instance in ERROR, off any node, with ``error`` as its newest fault.

        The fault is recorded first, so whoever sees ERROR finds why.
        """
        InstanceFault.record(self._context, self.uuid, error, host)
        self.vm_state, self.task_state = "error", None
        self.host = self.node = None
        self.save()

    @base.remotable
    def destroy(self):
        """Soft-delete the instance, writing its pending changes (its last state) in
        the same transaction, and take the times of the deletion (nothing else is read
        back); what it owns is archived with it later. Its allocations
        stay until its compute frees its devices (``ComputeNode.save_with_devices``)."""
        values = self._db_values(self.obj_what_changed())
        row = db_api.instance_destroy(
            self._context,
            self.uuid,
            values,
            release_allocations=not self._caller_releases_allocations(),
        )
        self.updated_at, self.deleted_at, self.deleted = row.updated_at, row.deleted_at, True
        self.obj_reset_changes(recursive=True)


def _check_node(node, node_id):
    """Refuse a ``node`` sent with the devices of ``node_id`` that is not that node."""
    if node is None:
        return
    if not isinstance(node, ComputeNode):
        raise exception.InvalidInput(
            reason=f"node must be a ComputeNode, not a {type(node).__name__}"
        )
    if node.id != node_id:
        raise exception.InvalidInput(
            reason=f"the devices are of compute node {node_id}, the node sent is {node.id}"
        )


@base.PcisimObjectRegistry.register
class InstanceList(base.ObjectListBase, base.PcisimObject):
    # Version 1.0: Instance 1.0
    # Version 1.1: Instance 1.1, added get_all
    # Version 1.2: Instance 1.2
    # Version 1.3: Instance 1.3
    # Version 1.4: Instance 1.4
    # Version 1.5: Instance 1.5
    # Version 1.6: Instance 1.6
    VERSION = "1.6"

    fields = {"objects": fields.ListOfObjectsField("Instance")}
    obj_relationships = {
        "objects": [
            ("1.0", "1.0"),
            ("1.1", "1.1"),
            ("1.2", "1.2"),
            ("1.3", "1.3"),
            ("1.4", "1.4"),
            ("1.5", "1.5"),
            ("1.6", "1.6"),
        ]
    }

    @classmethod
    @base.remotable
    def get_all(cls, context, expected_attrs=None):
        """Every live instance."""
        rows = db_api.instance_get_all(context)
        return base.obj_make_list(context, cls(context), rows, expected_attrs=expected_attrs or ())

    @classmethod
    @base.remotable
    def get_by_host_and_node(cls, context, host, node=None, expected_attrs=None):
        """The live instances on a host (and node, when given)."""
        rows = db_api.instance_get_all_by_host_and_node(context, host, node)
        return base.obj_make_list(context, cls(context), rows, expected_attrs=expected_attrs or ())
