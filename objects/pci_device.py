"""PCI devices of a compute node, as the compute's PCI tracker and the API see them."""

from oslo_serialization import jsonutils
from oslo_utils import versionutils

from pcisim import exception
from pcisim.db import api as db_api
from pcisim.objects import base, fields, pci_device_state


@base.PcisimObjectRegistry.register
class PciDevice(base.PcisimPersistentObject, base.PcisimObject):
    """One PCI device (or SR-IOV function) at an address of a compute node.

    A device that was never saved is inserted by ``create`` (or ``save``); once it has
    an id, ``save`` only ever updates its row, and raises ``PciDeviceNotFound`` when
    the row is gone instead of inserting a new one.
    """

    # Version 1.0: initial version
    # Version 1.1: added uuid
    VERSION = "1.1"

    # The PF of a VF and the VFs of a PF, linked by the PCI tracker (not fields: they
    # never travel). See objects/pci_device_state.py for how they constrain each other.
    parent_device = None
    child_devices = ()

    fields = {
        "id": fields.IntegerField(),
        "compute_node_id": fields.IntegerField(),
        "address": fields.StringField(),
        "vendor_id": fields.StringField(),
        "product_id": fields.StringField(),
        "dev_type": fields.PciDeviceTypeField(),
        "status": fields.PciDeviceStatusField(),
        "label": fields.StringField(),
        "dev_id": fields.StringField(nullable=True),
        "instance_uuid": fields.StringField(nullable=True),
        "request_id": fields.StringField(nullable=True),
        "extra_info": fields.DictOfStringsField(default={}),
        "numa_node": fields.IntegerField(nullable=True),
        "parent_addr": fields.StringField(nullable=True),
        "uuid": fields.UUIDField(nullable=True),
        **base.PcisimPersistentObject.fields,
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 1):
            primitive.pop("uuid", None)

    @classmethod
    def _from_db_object(cls, context, device, row):
        device._copy_row(row, skip={"extra_info"})
        device.extra_info = jsonutils.loads(row.extra_info) if row.extra_info else {}
        device._context = context
        device.obj_reset_changes()
        return device

    def _db_values(self, names):
        values = super()._db_values(names)
        if "extra_info" in values:
            values["extra_info"] = jsonutils.dumps(values["extra_info"])
        return values

    @classmethod
    @base.remotable
    def get_by_dev_addr(cls, context, compute_node_id, dev_addr):
        """The live device at ``dev_addr`` of a node; ``PciDeviceNotFound`` if none."""
        row = db_api.pci_device_get_by_addr(context, compute_node_id, dev_addr)
        return cls._from_db_object(context, cls(), row)

    @classmethod
    @base.remotable
    def get_by_dev_id(cls, context, id):
        """The live device with this id; ``PciDeviceNotFoundById`` if none."""
        return cls._from_db_object(context, cls(), db_api.pci_device_get_by_id(context, id))

    @base.remotable
    def create(self):
        """Insert this never-saved device; ``InvalidInput`` names any missing field."""
        if self.obj_attr_is_set("id"):
            raise exception.ObjectActionError(action="create", reason="already created")
        row = db_api.pci_device_create(self._context, self._db_values(self._set_field_names()))
        self._from_db_object(self._context, self, row)

    @base.remotable
    def save(self):
        """Write this device's pending changes.

        A never-saved device is created; a ``removed`` one is soft-deleted and becomes
        ``deleted``; otherwise the changed fields update the existing row, by the same
        conditional UPDATE as ``PciDeviceList.save`` (``pci_device_update``). Raises
        ``PciDeviceNotFound``, keeping the changes pending, when that row is gone.
        """
        if not self.obj_attr_is_set("id"):
            self.create()
        elif self.status == fields.PciDeviceStatus.REMOVED:
            self.destroy()
        elif self.status != fields.PciDeviceStatus.DELETED:
            self._update()

    def _update(self):
        values = self._db_values(self.obj_what_changed())
        if values:
            row = db_api.pci_device_update(
                self._context, self.compute_node_id, self.address, values
            )
            self._from_db_object(self._context, self, row)

    @base.remotable
    def destroy(self):
        """Soft-delete this device's row; ``PciDeviceNotFound`` if it is already gone."""
        row = db_api.pci_device_destroy(self._context, self.compute_node_id, self.address)
        self._from_db_object(self._context, self, row)

    def link_parent(self, parent):
        """Record that this VF belongs to the PF ``parent``."""
        self.parent_device = parent
        if not isinstance(parent.child_devices, list):
            parent.child_devices = []
        parent.child_devices.append(self)

    def unlink_parent(self):
        """Forget this VF's PF."""
        if self.parent_device is not None:
            self.parent_device.child_devices.remove(self)
            self.parent_device = None

    def unlink(self):
        """Forget this device's PF and VFs (it is leaving the tracker)."""
        self.unlink_parent()
        for vf in list(self.child_devices):
            vf.parent_device = None
        self.child_devices = ()

    def claim(self, instance_uuid, request_id=None):
        """Claim for an instance; returns every device whose status changed."""
        return pci_device_state.apply(self, "claim", instance_uuid, request_id)

    def allocate(self, instance_uuid, request_id=None):
        """Allocate to an instance (claimed by it, or available); returns changed devices."""
        return pci_device_state.apply(self, "allocate", instance_uuid, request_id)

    def free(self, instance_uuid=None):
        """Release a claim or allocation (of ``instance_uuid``, when given)."""
        return pci_device_state.apply(self, "free", instance_uuid)

    def remove(self):
        """Mark a free device gone from the hypervisor; saving soft-deletes its row."""
        return pci_device_state.apply(self, "remove")

    def is_available(self):
        return self.status == fields.PciDeviceStatus.AVAILABLE

    def _as_stored(self, context, written):
        """A copy of this device as its row stands once ``written`` is stored.

        ``written`` holds the column values ``pci_device_batch_save`` reports having
        set; the rest of the row is this device's own fields, which the conductor need
        not read back (a field never set is a NULL column).
        """
        own = {name: getattr(self, name) for name in self._set_field_names()}
        values = {**dict.fromkeys(self.fields), **own, **written}
        values["deleted"] = bool(values["deleted"])
        if "extra_info" in written or values["extra_info"] is None:
            values["extra_info"] = jsonutils.loads(written.get("extra_info") or "{}")
        stored = PciDevice(context, **values)
        stored.obj_reset_changes()
        return stored

    def _adopt(self, stored):
        """Take what the database decided (id, timestamps, deletion) and forget the
        changes that the stored copy reflects."""
        for name in base.NOT_WRITTEN | {"status"}:
            if stored.obj_attr_is_set(name):
                setattr(self, name, getattr(stored, name))
        self.obj_reset_changes()

    def needs_write(self):
        return (
            not self.obj_attr_is_set("id")
            or self.status == fields.PciDeviceStatus.REMOVED
            or bool(self.obj_what_changed())
        )

    def batch_change(self):
        """This device's pending write as (kind, values) for ``pci_device_batch_save``."""
        if not self.obj_attr_is_set("id"):
            return "create", self._db_values(self._set_field_names())
        if self.status == fields.PciDeviceStatus.REMOVED:
            return "destroy", None
        return "update", self._db_values(self.obj_what_changed())


@base.PcisimObjectRegistry.register
class PciDeviceList(base.ObjectListBase, base.PcisimObject):
    """Devices of a node or an instance; ``save`` writes all changes in one round trip."""

    # Version 1.0: PciDevice 1.0
    # Version 1.1: PciDevice 1.1
    # Version 1.2: added get_all
    # Version 1.3: save_batch and save take the holders the writer expects
    VERSION = "1.3"

    fields = {"objects": fields.ListOfObjectsField("PciDevice")}
    obj_relationships = {
        "objects": [("1.0", "1.0"), ("1.1", "1.1"), ("1.2", "1.1"), ("1.3", "1.1")]
    }

    @classmethod
    def _from_rows(cls, context, rows):
        return base.obj_make_list(context, cls(context), rows)

    @classmethod
    @base.remotable
    def get_by_compute_node(cls, context, node_id):
        """The live devices of a compute node, by address."""
        return cls._from_rows(context, db_api.pci_device_get_all_by_node(context, node_id))

    @classmethod
    @base.remotable
    def get_all(cls, context, filters=None):
        """Live devices of every node; ``filters`` keys: host, status, dev_type,
        instance_uuid, compute_node_id. ``InvalidInput`` for any other key."""
        rows = db_api.pci_device_get_all(context, **(filters or {}))
        return cls._from_rows(context, rows)

    @classmethod
    @base.remotable
    def get_by_instance_uuid(cls, context, instance_uuid):
        """The live devices an instance holds."""
        rows = db_api.pci_device_get_all_by_instance_uuid(context, instance_uuid)
        return cls._from_rows(context, rows)

    @classmethod
    @base.remotable
    def save_batch(cls, context, node_id, devices, expected=None):
        """Write the pending changes of ``devices`` of one node in one transaction.

        Returns the devices as stored afterwards; a device whose row is gone is left
        out (nothing is inserted for it). ``InvalidInput`` when a new device lacks a
        required field, and then nothing at all is written. ``expected`` maps
        addresses to the ``status`` and ``instance_uuid`` the writer last read or
        wrote; ``PciDeviceConflict``, with nothing written, when another writer changed
        one of those rows since.
        """
        changes, sent = {"create": [], "update": {}, "destroy": []}, {}
        for device in devices:
            kind, values = device.batch_change()
            sent[kind, device.address] = device
            if kind == "create":
                changes["create"].append(values)
            elif kind == "update":
                changes["update"][device.address] = values
            else:
                changes["destroy"].append(device.address)
        result = db_api.pci_device_batch_save(context, node_id, **changes, expected=expected)
        written = (("create", result.created), ("update", result.updated))
        written += (("destroy", result.destroyed),)
        stored = [
            sent[kind, address]._as_stored(context, values)
            for kind, rows in written
            for address, values in rows.items()
        ]
        return cls(context, objects=stored)

    def save(self, expected=None, node=None, released=None):
        """Write every device with pending changes in one round trip, with the pending
        changes of their compute ``node`` when given (``ComputeNode.save_with_devices``,
        which also ends the allocations of the ``released`` instances there).

        The devices must belong to one compute node. Saved devices take the stored
        values and have no pending changes left. Raises ``PciDevicesNotFound`` naming
        the devices whose rows are gone, after saving the others; those keep their
        pending changes. With ``expected`` (see ``save_batch``) it may raise
        ``PciDeviceConflict`` instead, having saved nothing.
        """
        pending = [device for device in self.objects if device.needs_write()]
        if not pending:
            return
        node_ids = {device.compute_node_id for device in pending}
        if len(node_ids) > 1:
            raise exception.ObjectActionError(
                action="save", reason=f"devices of several compute nodes: {sorted(node_ids)}"
            )
        node_id = node_ids.pop()
        batch = PciDeviceList(self._context, objects=pending)
        if node is None:
            saved = self.save_batch(self._context, node_id, batch, expected)
        else:
            saved = node.save_with_devices(batch, expected, released)
        stored = {d.address: d for d in saved}
        missing = []
        for device in pending:
            if device.address in stored:
                device._adopt(stored[device.address])
            else:
                missing.append(device.address)
        if missing:
            raise exception.PciDevicesNotFound(node_id=node_id, addresses=missing)
