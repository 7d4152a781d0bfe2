"""The base of every pcisim object: namespace, registry, serializer and indirection.

Objects are the contract between processes. A method decorated ``@remotable`` (and
``@classmethod`` over ``@remotable`` for reads) runs where the database is: directly
in a thread that has the database (the conductor's), and otherwise on the conductor,
through ``indirection_api`` over RPC. The object's context travels with the call, and
the conductor sends back the fields the method changed.

``indirection_api`` is resolved per thread (see ``pcisim.dbaccess``), not set once per
class as upstream does, so that the conductor and the computes can share a process and
still talk over RPC.
"""

import contextlib
import functools

from oslo_utils import timeutils
from oslo_versionedobjects import base as ovo_base
from oslo_versionedobjects import fields

from pcisim import dbaccess

remotable = ovo_base.remotable
obj_make_list = ovo_base.obj_make_list


class PcisimObjectRegistry(ovo_base.VersionedObjectRegistry):
    """The one registry of pcisim's object classes."""


class _ThreadIndirection:
    """``indirection_api`` as seen from the current thread."""

    api = None

    def __get__(self, obj, cls):
        return None if dbaccess.allowed() else _ThreadIndirection.api


def set_indirection_api(api):
    """Send remotable calls of threads without the database to ``api`` (or nowhere)."""
    _ThreadIndirection.api = api


class PcisimObject(ovo_base.VersionedObject):
    """Base class of pcisim's versioned objects."""

    OBJ_SERIAL_NAMESPACE = "pcisim_object"
    OBJ_PROJECT_NAMESPACE = "pcisim"

    indirection_api = _ThreadIndirection()

    # NOTE: {remotable method: the fields it reads besides the pending changes}. Called
    # from a process without the database, such a method is sent a copy of the object
    # holding only those fields and the changes (``obj_for_call``): a node's two pool
    # lists, or an instance's flavor and PCI requests, travel both ways and are
    # compared on the conductor only when they changed.
    obj_sent_for = {}

    def obj_for_call(self, objmethod):
        """What an RPC call of the remotable ``objmethod`` sends: this object, or for a
        method of ``obj_sent_for`` a copy of the fields it reads and of the pending
        changes, pending in the copy too. The caller's object takes the call's updates
        as ever (``remotable``)."""
        needed = self.obj_sent_for.get(objmethod)
        if needed is None:
            return self
        changed = self.obj_what_changed()
        stored_in = _storage_attributes(type(self))
        sent = type(self)(self._context)
        sent.VERSION = self.VERSION  # an object read from an older primitive keeps its own
        for name in (*needed, *changed):
            setattr(sent, stored_in[name], getattr(self, stored_in[name]))
        sent._changed_fields = set(changed)
        return sent

    # NOTE: oslo.versionedobjects' obj_attr_is_set builds the list of every field name
    # to look one up, and its obj_what_changed asks that of every field, holding an
    # object or not: serializing, saving and resetting an object cost O(fields^2).
    # These read the attribute where the value is kept, and look for nested changes
    # only in the fields that hold objects.
    def obj_attr_is_set(self, attrname):
        stored_in = _storage_attributes(type(self)).get(attrname)
        if stored_in is None:
            return super().obj_attr_is_set(attrname)
        return hasattr(self, stored_in)

    def obj_what_changed(self):
        changes = {name for name in self._changed_fields if name in self.fields}
        stored_in = _storage_attributes(type(self))
        for name in _object_fields(type(self)):
            value = getattr(self, stored_in[name], None)
            if isinstance(value, ovo_base.VersionedObject) and value.obj_what_changed():
                changes.add(name)
        return changes

    @contextlib.contextmanager
    def obj_alternate_context(self, context):
        """Within the block, remotable calls of this object carry ``context``."""
        previous, self._context = self._context, context
        try:
            yield
        finally:
            self._context = previous


NOT_WRITTEN = frozenset({"id", "created_at", "updated_at", "deleted_at", "deleted"})


class PcisimPersistentObject:
    """Bookkeeping fields of objects stored in a table, and the copies to and from rows."""

    fields = {
        "created_at": fields.DateTimeField(nullable=True),
        "updated_at": fields.DateTimeField(nullable=True),
        "deleted_at": fields.DateTimeField(nullable=True),
        "deleted": fields.BooleanField(default=False),
    }

    def _copy_row(self, row, skip=()):
        """Set every field the row has a column for, except ``skip``."""
        for name in self.fields:
            if name in skip or not hasattr(row, name):
                continue
            value = getattr(row, name)
            setattr(self, name, bool(value) if name == "deleted" else value)

    @classmethod
    def _from_db_object(cls, context, obj, row):
        obj._copy_row(row)
        obj._context = context
        obj.obj_reset_changes()
        return obj

    def _db_values(self, names):
        """Column values of the fields ``names``: no bookkeeping, datetimes naive UTC."""
        values = {}
        for name in names:
            if name not in NOT_WRITTEN:
                value = getattr(self, name)
                is_datetime = isinstance(self.fields[name], fields.DateTimeField)
                values[name] = naive_utc(value) if is_datetime else value
        return values

    def _set_field_names(self):
        return list(self._set_values())

    def _set_values(self):
        """{field: value} of every field set."""
        values = {}
        for name, stored_in in _storage_attributes(type(self)).items():
            value = getattr(self, stored_in, _UNSET)
            if value is not _UNSET:
                values[name] = value
        return values

    def _is_set(self, name):
        """``obj_attr_is_set`` of a field."""
        return hasattr(self, _storage_attributes(type(self))[name])

    def _take_decided(self, values):
        """Set fields to what the database decided, ``values`` already of their
        fields' types, and forget every pending change."""
        stored_in = _storage_attributes(type(self))
        for name, value in values.items():
            setattr(self, stored_in[name], value)
        self.obj_reset_changes()


# NOTE: oslo.versionedobjects keeps a field's value in the attribute _get_attrname(name)
# of the object. Reading and setting it there, rather than through obj_attr_is_set and
# the field's property (which builds a list of every field name and coerces the value
# at each call), is what lets a first sync turn thousands of devices into their
# changes and take the database's answer in a few microseconds a device.
_UNSET = object()


@functools.cache
def _storage_attributes(cls):
    return {name: ovo_base._get_attrname(name) for name in cls.fields}


@functools.cache
def _object_fields(cls):
    """The fields of ``cls`` that can hold an object."""
    return tuple(
        name
        for name, field in cls.fields.items()
        if isinstance(getattr(field, "_type", None), fields.Object)
    )


class PcisimObjectSerializer(ovo_base.VersionedObjectSerializer):
    """Turns pcisim objects into primitives and back; backports through the conductor."""

    OBJ_BASE_CLASS = PcisimObject


class ObjectListBase(ovo_base.ObjectListBase):
    """A versioned list of objects."""


def naive_utc(value):
    """A datetime as the naive UTC value the database columns hold."""
    if value is None or value.tzinfo is None:
        return value
    return timeutils.normalize_time(value)
