"""PCI devices of a compute node, as the compute's PCI tracker and the API see them."""

import datetime
import json

from oslo_serialization import jsonutils
from oslo_utils import versionutils

from pcisim import exception
from pcisim.db import api as db_api
from pcisim.objects import base, fields, pci_device_state

_NOT_SENT_ON_CREATE = base.NOT_WRITTEN | {"compute_node_id"}


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

    def obj_what_changed(self):
        # NOTE: a device holds no nested object, so what changed is exactly the set of
        # fields set since the last reset. The generic walk looks at every field for
        # nested changes and cost a first sync about 10 us a device (it runs for each
        # device on both sides of a save).
        return set(self._changed_fields)

    def needs_write(self):
        return (
            not self._is_set("id")
            or self.status == fields.PciDeviceStatus.REMOVED
            or bool(self._changed_fields)
        )

    def batch_change(self):
        """This device's pending write as (kind, change): a compact primitive that
        ``PciDeviceList.save_batch`` takes instead of the whole device.

        kind "create": the values of every field set (a new device); "update": the
        values of the fields changed; "destroy": None (a removed device). Values are
        the fields' own primitives: the written fields are strings, integers and a
        dict of strings, which travel as they are.
        """
        if not self._is_set("id"):
            # A column not given is NULL in the new row, and the node is the batch's.
            return "create", {
                name: value
                for name, value in self._set_values().items()
                if value is not None and name not in _NOT_SENT_ON_CREATE
            }
        if self.status == fields.PciDeviceStatus.REMOVED:
            return "destroy", None
        names = self._changed_fields - base.NOT_WRITTEN
        return "update", {name: getattr(self, name) for name in names}

    @classmethod
    def column_values(cls, address, change):
        """The column values of a change that arrived as a compact primitive: each
        field coerced as setting it on a device would; ``InvalidInput`` naming the
        device and field when a value is not one the field takes. Keys that are not
        fields are left for the database layer to refuse."""
        values = dict(change)
        for name, value in change.items():
            field = cls.fields.get(name)
            if field is None:
                continue
            try:
                values[name] = field.coerce(cls, name, value)
            except (ValueError, TypeError) as error:
                raise exception.InvalidInput(reason=f"PCI device {address}: {name}: {error}")
        if values.get("extra_info") is not None:
            # NOTE: coerced, it is a dict of strings, which the standard library
            # writes as jsonutils does, in half the time.
            values["extra_info"] = json.dumps(values["extra_info"])
        return values

    def _as_stored(self, context, written):
        """A copy of this device as its row stands once ``written`` is stored.

        ``written`` holds the column values ``pci_device_batch_save`` reports having
        set; the rest of the row is this device's own fields, which the conductor need
        not read back (a field never set is a NULL column). For callers of
        PciDeviceList 1.3 and older, which are answered with whole devices.
        """
        own = {name: getattr(self, name) for name in self._set_field_names()}
        values = {**dict.fromkeys(self.fields), **own, **written}
        values["deleted"] = bool(values["deleted"])
        if "extra_info" in written or values["extra_info"] is None:
            values["extra_info"] = jsonutils.loads(written.get("extra_info") or "{}")
        stored = PciDevice(context, **values)
        stored.obj_reset_changes()
        return stored

    def adopt_write(self, kind, at, device_id=None):
        """Take what the database decided for this device's write of ``kind`` (see
        ``batch_change``) made at ``at``, and forget the pending changes it stored.

        A created row has its id ``device_id``, ``created_at`` ``at`` and nothing
        else set by the database; an updated row ``updated_at``; a soft-deleted row
        is ``deleted``, at ``at``.
        """
        if kind == "create":
            decided = {"id": int(device_id), "created_at": at, "updated_at": None}
            decided.update(deleted_at=None, deleted=False)
        elif kind == "update":
            decided = {"updated_at": at}
        else:
            decided = {"status": fields.PciDeviceStatus.DELETED, "deleted": True}
            decided.update(deleted_at=at, updated_at=at)
        self._take_decided(decided)


@base.PcisimObjectRegistry.register
class PciDeviceList(base.ObjectListBase, base.PcisimObject):
    """Devices of a node or an instance; ``save`` writes all changes in one round trip."""

    # Version 1.0: PciDevice 1.0
    # Version 1.1: PciDevice 1.1
    # Version 1.2: added get_all
    # Version 1.3: save_batch and save take the holders the writer expects
    # Version 1.4: save_batch takes each device's changes as a compact primitive and
    #              answers only what the writer adopts (ids, the time, the rows not
    #              found); a PciDeviceList it is given instead (1.3 and older callers)
    #              is answered with the devices as stored, as before. As ever,
    #              conductors are upgraded before computes.
    VERSION = "1.4"

    fields = {"objects": fields.ListOfObjectsField("PciDevice")}
    obj_relationships = {
        "objects": [("1.0", "1.0"), ("1.1", "1.1"), ("1.2", "1.1"), ("1.3", "1.1"), ("1.4", "1.1")]
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
    def save_batch(cls, context, node_id, changes, expected=None):
        """Write the pending changes of devices of one node in one transaction.

        ``changes`` is the JSON text of what ``changes_of`` makes of the devices:
        {"create": [values], "update": {address: values}, "destroy": [addresses]},
        each device's values as ``PciDevice.batch_change`` gives them (one text is
        one value to the RPC serializer; see ``save``). The answer holds only what the
        writer adopts: {"at": the time of the writes (ISO 8601), "created": {address:
        new id}, "missing": [addresses]}, the addresses to update or destroy that have
        no live row (nothing is inserted for them; the others are written). "at" is
        the ``created_at``, ``updated_at`` or ``deleted_at`` of each row written.

        ``InvalidInput``, with nothing written, when a new device lacks a required
        field or a value is not one its field takes. ``expected`` maps addresses to
        the ``status`` and ``instance_uuid`` the writer last read or wrote;
        ``PciDeviceConflict``, with nothing written, when another writer changed one of
        those rows since.

        A PciDeviceList as ``changes`` is the call of a compute of PciDeviceList 1.3 or
        older: its devices are written the same way, and the answer is the list of
        them as stored (the devices whose rows are gone left out).
        """
        if isinstance(changes, PciDeviceList):
            return cls._save_devices(context, node_id, changes, expected)
        result = cls._write(context, node_id, _decoded(changes), expected)
        return {
            "at": _at_primitive(result.at),
            "created": {address: row["id"] for address, row in result.created.items()},
            "missing": result.missing,
        }

    @classmethod
    def _write(cls, context, node_id, changes, expected):
        """Write compact ``changes``; ``db_api.pci_device_batch_save``'s result."""
        create, update, destroy = _checked_changes(changes)
        return db_api.pci_device_batch_save(
            context,
            node_id,
            create=[PciDevice.column_values(values.get("address"), values) for values in create],
            update={address: PciDevice.column_values(address, v) for address, v in update.items()},
            destroy=destroy,
            expected=expected,
        )

    @classmethod
    def _save_devices(cls, context, node_id, devices, expected):
        """``save_batch`` for a caller of PciDeviceList 1.3 or older: the devices as
        stored, built from what was written and the devices sent."""
        changes, kinds = cls.changes_of(devices)
        result = cls._write(context, node_id, changes, expected)
        written = {"create": result.created, "update": result.updated}
        written["destroy"] = result.destroyed
        stored = [
            device._as_stored(context, written[kind][device.address])
            for device, kind in zip(devices, kinds, strict=True)
            if device.address in written[kind]
        ]
        return cls(context, objects=stored)

    @staticmethod
    def changes_of(devices):
        """The compact changes of ``devices`` for ``save_batch``, and the kind of
        write of each device, in their order."""
        changes, kinds = {"create": [], "update": {}, "destroy": []}, []
        for device in devices:
            kind, values = device.batch_change()
            kinds.append(kind)
            if kind == "create":
                changes["create"].append(values)
            elif kind == "update":
                changes["update"][device.address] = values
            else:
                changes["destroy"].append(device.address)
        return changes, kinds

    def save(self, expected=None, node=None, released=None, instance=None):
        """Write every device with pending changes in one round trip, with the pending
        changes of their compute ``node`` when given (``ComputeNode.save_with_devices``,
        which also ends the allocations of the ``released`` instances there), and of
        ``instance`` when given (``Instance.save_with_devices``, the node's with them).

        The devices must belong to one compute node. Only their changes travel, and
        saved devices take what the database decided (ids, timestamps, deletion) and
        have no pending changes left. Raises ``PciDevicesNotFound`` naming the devices
        whose rows are gone, after saving the others; those keep their pending
        changes. With ``expected`` (see ``save_batch``) it may raise
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
        changes, kinds = self.changes_of(pending)
        # NOTE: the changes travel as one JSON text. oslo.versionedobjects' serializer
        # visits every value of a nested primitive, looking for objects to convert,
        # on both sides: about 6 us a device of a first sync, for nothing; a text is
        # one value to it.
        changes = json.dumps(changes)
        if instance is not None:
            answer = self._save_with_instance(instance, node, node_id, changes, expected)
        elif node is not None:
            answer = node.save_with_devices(changes, expected, released)
        else:
            answer = self.save_batch(self._context, node_id, changes, expected)
        at, created = _AT.from_primitive(None, "at", answer["at"]), answer["created"]
        missing = set(answer["missing"])
        for device, kind in zip(pending, kinds, strict=True):
            if kind == "create" or device.address not in missing:
                device.adopt_write(kind, at, created.get(device.address))
        if missing:
            raise exception.PciDevicesNotFound(node_id=node_id, addresses=sorted(missing))

    @staticmethod
    def _save_with_instance(instance, node, node_id, changes, expected):
        """``Instance.save_with_devices``, carrying the node's pending changes (only
        those and its id travel); the node takes the outcome."""
        sent = None if node is None else node.obj_for_call("save")
        answer = instance.save_with_devices(node_id, changes, expected, node=sent)
        if "node_at" in answer:
            node.adopt_save(_AT.from_primitive(None, "node_at", answer["node_at"]))
        return answer


_AT = fields.DateTimeField()
# What ``save_batch`` and ``ComputeNode.save_with_devices`` take when no device changed.
NO_CHANGES = json.dumps({"create": [], "update": {}, "destroy": []})


def _at_primitive(at):
    """The time of a batch's writes (naive UTC, as the columns hold it) as its answer
    carries it: ISO 8601 with microseconds, which a DateTimeField primitive drops, so
    that the writer's timestamps are the rows' own. Read back by ``_AT.from_primitive``.
    """
    return at.replace(tzinfo=datetime.UTC).isoformat()


def _decoded(changes):
    """The compact changes of their JSON text; ``InvalidInput`` if it is none."""
    if not isinstance(changes, str):
        raise exception.InvalidInput(
            reason=f"PCI device changes must be JSON text, not a {type(changes).__name__}"
        )
    try:
        return json.loads(changes)
    except ValueError as error:
        raise exception.InvalidInput(reason=f"PCI device changes are not JSON: {error}")


def _checked_changes(changes):
    """(create, update, destroy) of compact ``changes``; ``InvalidInput`` when they
    are not of the shape ``PciDeviceList.changes_of`` makes."""
    shape = {"create": list, "update": dict, "destroy": list}
    if not isinstance(changes, dict) or not set(changes) <= set(shape):
        kinds = ", ".join(f"{kind} ({wanted.__name__})" for kind, wanted in shape.items())
        raise exception.InvalidInput(reason=f"PCI device changes must be a dict of {kinds}")
    create, update, destroy = (changes.get(kind, wanted()) for kind, wanted in shape.items())
    for kind, wanted in shape.items():
        if not isinstance(changes.get(kind, wanted()), wanted):
            raise exception.InvalidInput(
                reason=f"PCI device changes: {kind} must be a {wanted.__name__}"
            )
    values = [*create, *update.values()]
    if not all(isinstance(v, dict) for v in values) or not all(
        isinstance(a, str) for a in [*update, *destroy]
    ):
        raise exception.InvalidInput(
            reason="PCI device changes: values must be dicts and addresses strings"
        )
    return create, update, destroy
