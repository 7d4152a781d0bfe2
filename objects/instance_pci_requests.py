"""What PCI devices an instance asked for, stored as JSON in ``instance_extra``."""

from oslo_serialization import jsonutils
from oslo_utils import versionutils

from pcisim.db import api as db_api
from pcisim.objects import base, fields


@base.PcisimObjectRegistry.register
class InstancePCIRequest(base.PcisimObject):
    """``count`` devices matching any one of the ``spec`` dicts (an alias expands so)."""

    # Version 1.0: initial version
    # Version 1.1: added numa_policy
    VERSION = "1.1"

    fields = {
        "count": fields.IntegerField(),
        "spec": fields.ListOfDictOfNullableStringsField(),
        "alias_name": fields.StringField(nullable=True),
        "request_id": fields.UUIDField(nullable=True),
        "numa_policy": fields.StringField(nullable=True),
    }

    def obj_make_compatible(self, primitive, target_version):
        super().obj_make_compatible(primitive, target_version)
        if versionutils.convert_version_to_tuple(target_version) < (1, 1):
            primitive.pop("numa_policy", None)

    def to_dict(self):
        return {name: getattr(self, name) for name in self.fields if self.obj_attr_is_set(name)}


@base.PcisimObjectRegistry.register
class InstancePCIRequests(base.PcisimObject):
    """All PCI requests of one instance."""

    # Version 1.0: InstancePCIRequest 1.0
    # Version 1.1: InstancePCIRequest 1.1
    VERSION = "1.1"

    fields = {
        "instance_uuid": fields.UUIDField(),
        "requests": fields.ListOfObjectsField("InstancePCIRequest", default=[]),
    }
    obj_relationships = {"requests": [("1.0", "1.0"), ("1.1", "1.1")]}

    def to_json(self):
        return jsonutils.dumps([request.to_dict() for request in self.requests])

    @classmethod
    def from_json(cls, context, instance_uuid, text):
        requests = [InstancePCIRequest(**values) for values in jsonutils.loads(text or "[]")]
        result = cls(context, instance_uuid=instance_uuid, requests=requests)
        result.obj_reset_changes(recursive=True)
        return result

    @classmethod
    @base.remotable
    def get_by_instance_uuid(cls, context, instance_uuid):
        """The requests of a live instance; ``InstanceNotFound`` if there is none."""
        extra = db_api.instance_extra_get_by_instance_uuid(context, instance_uuid)
        return cls.from_json(context, instance_uuid, extra.pci_requests)

    @base.remotable
    def save(self):
        """Store the requests in the instance's ``instance_extra`` row."""
        db_api.instance_extra_update_by_uuid(
            self._context, self.instance_uuid, {"pci_requests": self.to_json()}
        )
        self.obj_reset_changes(recursive=True)
