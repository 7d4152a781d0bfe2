"""Flavors: named sizes of instance with their extra specs, as Nova's flavors are.

An instance keeps a copy of the flavor it was built from (``Instance.flavor``), so
deleting or changing a flavor changes no instance.
"""

from oslo_serialization import jsonutils

from pcisim.db import flavors as db_flavors
from pcisim.objects import base, fields

# Fields a flavor is created with; the rest is bookkeeping or extra specs.
VALUES = (
    "flavorid",
    "name",
    "memory_mb",
    "vcpus",
    "root_gb",
    "ephemeral_gb",
    "swap",
    "is_public",
    "disabled",
    "description",
)


@base.PcisimObjectRegistry.register
class Flavor(base.PcisimPersistentObject, base.PcisimObject):
    """A flavor; ``flavorid`` is the id the API shows."""

    # Version 1.0: initial version
    VERSION = "1.0"

    fields = {
        "id": fields.IntegerField(),
        "flavorid": fields.StringField(),
        "name": fields.StringField(),
        "memory_mb": fields.IntegerField(),
        "vcpus": fields.IntegerField(),
        "root_gb": fields.IntegerField(),
        "ephemeral_gb": fields.IntegerField(default=0),
        "swap": fields.IntegerField(default=0),
        "is_public": fields.BooleanField(default=True),
        "disabled": fields.BooleanField(default=False),
        "description": fields.StringField(nullable=True),
        "extra_specs": fields.DictOfStringsField(default={}),
        **base.PcisimPersistentObject.fields,
    }

    @classmethod
    def _from_db_object(cls, context, flavor, values):
        for name in flavor.fields:
            if name in values:
                value = values[name]
                setattr(flavor, name, bool(value) if name == "deleted" else value)
        flavor._context = context
        flavor.obj_reset_changes()
        return flavor

    @classmethod
    @base.remotable
    def get_by_flavor_id(cls, context, flavorid):
        """The live flavor; ``FlavorNotFound`` when there is none."""
        return cls._from_db_object(
            context, cls(), db_flavors.flavor_get_by_flavor_id(context, flavorid)
        )

    @base.remotable
    def create(self):
        """Insert the flavor with its extra specs; ``FlavorIdExists`` or
        ``FlavorExists`` when a live flavor has its id or name."""
        self.obj_set_defaults()
        values = {name: getattr(self, name) for name in VALUES}
        row = db_flavors.flavor_create(self._context, values, self.extra_specs)
        self._from_db_object(self._context, self, row)

    @base.remotable
    def update_extra_specs(self, extra_specs):
        """Set ``extra_specs`` (``{key: value}``), keeping the other keys."""
        self.extra_specs = db_flavors.flavor_extra_specs_update_or_create(
            self._context, self.flavorid, extra_specs
        )
        self.obj_reset_changes(["extra_specs"])

    @base.remotable
    def delete_extra_spec(self, key):
        """Remove one extra spec; ``FlavorExtraSpecsNotFound`` when there is none."""
        db_flavors.flavor_extra_specs_delete(self._context, self.flavorid, key)
        self.extra_specs = {k: v for k, v in self.extra_specs.items() if k != key}
        self.obj_reset_changes(["extra_specs"])

    @base.remotable
    def destroy(self):
        """Soft-delete the flavor; instances built from it keep their copy."""
        db_flavors.flavor_destroy(self._context, self.flavorid)

    def to_json(self):
        """The copy an instance keeps (``instance_extra.flavor``)."""
        return jsonutils.dumps(self.obj_to_primitive())

    @classmethod
    def from_json(cls, text):
        return cls.obj_from_primitive(jsonutils.loads(text)) if text else None


@base.PcisimObjectRegistry.register
class FlavorList(base.ObjectListBase, base.PcisimObject):
    # Version 1.0: Flavor 1.0
    VERSION = "1.0"

    fields = {"objects": fields.ListOfObjectsField("Flavor")}
    obj_relationships = {"objects": [("1.0", "1.0")]}

    @classmethod
    @base.remotable
    def get_all(cls, context, is_public=None, min_memory_mb=None, min_root_gb=None):
        """Live flavors by flavorid; ``is_public`` None for public and private ones."""
        rows = db_flavors.flavor_get_all(context, is_public, min_memory_mb, min_root_gb)
        return base.obj_make_list(context, cls(context), rows)
