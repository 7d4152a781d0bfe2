"""Services: which compute services run, and whether each is up."""

from oslo_utils import timeutils

from pcisim.db import api as db_api
from pcisim.objects import base, fields


@base.PcisimObjectRegistry.register
class Service(base.PcisimPersistentObject, base.PcisimObject):
    """A service on a host; up while it reports in and is not forced down."""

    # Version 1.0: initial version
    VERSION = "1.0"

    fields = {
        "id": fields.IntegerField(),
        "host": fields.StringField(),
        "binary": fields.StringField(),
        "topic": fields.StringField(nullable=True),
        "report_count": fields.IntegerField(default=0),
        "last_seen_up": fields.DateTimeField(nullable=True),
        "forced_down": fields.BooleanField(default=False),
        "disabled": fields.BooleanField(default=False),
        **base.PcisimPersistentObject.fields,
    }

    @classmethod
    @base.remotable
    def get_by_host_and_binary(cls, context, host, binary):
        """The live service record; ``ServiceNotFound`` if none."""
        row = db_api.service_get_by_host_and_binary(context, host, binary)
        return cls._from_db_object(context, cls(), row)

    @base.remotable
    def create(self):
        """Insert the record; ``ServiceExists`` when the host runs this binary already."""
        row = db_api.service_create(self._context, self._db_values(self._set_field_names()))
        self._from_db_object(self._context, self, row)

    @base.remotable
    def save(self):
        """Write pending changes (a heartbeat, forced_down)."""
        values = self._db_values(self.obj_what_changed())
        if values:
            row = db_api.service_update(self._context, self.id, values)
            self._from_db_object(self._context, self, row)

    def is_up(self, down_after_seconds):
        """Up when not forced down and seen within ``down_after_seconds``."""
        if self.forced_down or self.last_seen_up is None:
            return False
        return not timeutils.is_older_than(self.last_seen_up, down_after_seconds)

    def heartbeat(self):
        """Record that the service is alive, through the conductor."""
        self.report_count += 1
        self.last_seen_up = timeutils.utcnow(with_timezone=True)
        self.save()


@base.PcisimObjectRegistry.register
class ServiceList(base.ObjectListBase, base.PcisimObject):
    # Version 1.0: Service 1.0
    VERSION = "1.0"

    fields = {"objects": fields.ListOfObjectsField("Service")}
    obj_relationships = {"objects": [("1.0", "1.0")]}

    @classmethod
    @base.remotable
    def get_all_by_binary(cls, context, binary):
        """Every live service record of a binary."""
        return base.obj_make_list(
            context, cls(context), db_api.service_get_all_by_binary(context, binary)
        )
