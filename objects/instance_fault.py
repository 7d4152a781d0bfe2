"""Instance faults: why an instance went to ERROR."""

from pcisim.db import api as db_api
from pcisim.objects import base, fields

MESSAGE_LENGTH = 255


@base.PcisimObjectRegistry.register
class InstanceFault(base.PcisimPersistentObject, base.PcisimObject):
    """One recorded failure of an instance, newest first when listed."""

    # Version 1.0: initial version
    VERSION = "1.0"

    fields = {
        "id": fields.IntegerField(),
        "instance_uuid": fields.UUIDField(),
        "code": fields.IntegerField(),
        "message": fields.StringField(nullable=True),
        "details": fields.StringField(nullable=True),
        "host": fields.StringField(nullable=True),
        **base.PcisimPersistentObject.fields,
    }

    @base.remotable
    def create(self):
        """Insert the fault; ``InstanceNotFound`` when the instance does not exist."""
        values = {
            name: getattr(self, name)
            for name in ("instance_uuid", "code", "message", "details", "host")
            if self.obj_attr_is_set(name)
        }
        self._from_db_object(
            self._context, self, db_api.instance_fault_create(self._context, values)
        )

    @classmethod
    def record(cls, context, instance_uuid, error, host=None):
        """Record ``error`` (an exception) as the instance's newest fault."""
        fault = cls(
            context,
            instance_uuid=instance_uuid,
            code=getattr(error, "code", 500),
            message=f"{type(error).__name__}: {error}"[:MESSAGE_LENGTH],
            details=str(error),
            host=host,
        )
        fault.create()
        return fault


@base.PcisimObjectRegistry.register
class InstanceFaultList(base.ObjectListBase, base.PcisimObject):
    # Version 1.0: InstanceFault 1.0
    VERSION = "1.0"

    fields = {"objects": fields.ListOfObjectsField("InstanceFault")}
    obj_relationships = {"objects": [("1.0", "1.0")]}

    @classmethod
    @base.remotable
    def get_by_instance_uuids(cls, context, instance_uuids):
        """Faults of the given instances, newest first."""
        rows = [
            fault
            for faults in db_api.instance_fault_get_by_instance_uuids(
                context, instance_uuids
            ).values()
            for fault in faults
        ]
        rows.sort(key=lambda row: row.id, reverse=True)
        return base.obj_make_list(context, cls(context), rows)
