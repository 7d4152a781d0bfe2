"""Services: which services run, whether each is up, and which version of the code."""

from oslo_utils import timeutils, versionutils

from pcisim import exception
from pcisim.db import api as db_api
from pcisim.objects import base, fields

# What a service of each version speaks; a service records its version (the last
# index) when it starts. Add an entry when a change to an RPC API or an object is one
# that other services must know of before they talk to it.
SERVICE_VERSION_HISTORY = (
    # Version 0: before services recorded their version.
    {"conductor_rpc": "1.0", "compute_rpc": "1.0"},
    # Version 1: services record their version (Service 1.1).
    {"conductor_rpc": "1.0", "compute_rpc": "1.0"},
)
SERVICE_VERSION = len(SERVICE_VERSION_HISTORY) - 1


@base.PcisimObjectRegistry.register
class Service(base.PcisimPersistentObject, base.PcisimObject):
    """A service on a host; up while it reports in and is not forced down."""

    # Version 1.0: initial version
    # Version 1.1: added version
    VERSION = "1.1"

    fields = {
        "id": fields.IntegerField(),
        "host": fields.StringField(),
        "binary": fields.StringField(),
        "topic": fields.StringField(nullable=True),
        "report_count": fields.IntegerField(default=0),
        "last_seen_up": fields.DateTimeField(nullable=True),
        "forced_down": fields.BooleanField(default=False),
        "disabled": fields.BooleanField(default=False),
        "version": fields.IntegerField(nullable=True),
        **base.PcisimPersistentObject.fields,
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 1):
            primitive.pop("version", None)

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

    @classmethod
    def register(cls, context, host, binary, topic=None):
        """The live record of ``binary`` on ``host``, created when missing, saying the
        version of this code (``SERVICE_VERSION``), which ``pcisim-status`` reads."""
        try:
            record = cls.get_by_host_and_binary(context, host, binary)
        except exception.ServiceNotFound:
            record = cls(context, host=host, binary=binary, topic=topic, version=SERVICE_VERSION)
            try:
                record.create()
                return record
            except exception.ServiceExists:  # NOTE: another process of the host came first
                record = cls.get_by_host_and_binary(context, host, binary)
        if record.version != SERVICE_VERSION:
            record.version = SERVICE_VERSION
            record.save()
        return record

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
    # Version 1.1: Service 1.1
    VERSION = "1.1"

    fields = {"objects": fields.ListOfObjectsField("Service")}
    obj_relationships = {"objects": [("1.0", "1.0"), ("1.1", "1.1")]}

    @classmethod
    @base.remotable
    def get_all_by_binary(cls, context, binary):
        """Every live service record of a binary."""
        return base.obj_make_list(
            context, cls(context), db_api.service_get_all_by_binary(context, binary)
        )
