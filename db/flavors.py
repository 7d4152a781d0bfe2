"""Flavors and their extra specs: every read and write of the ``flavors`` and
``flavor_extra_specs`` tables.

A flavor is read with its live extra specs, as one dict of its columns plus
``extra_specs`` (``{key: value}``). Deleting a flavor soft-deletes it; its extra specs
are archived with it (the flavor owns them by foreign key). Errors name the flavor by
the id the API shows (``flavorid``).
"""

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_utils import timeutils

from pcisim import exception
from pcisim.db import models
from pcisim.db.engine import reader, writer

FLAVORS = models.Flavor.__table__
SPECS = models.FlavorExtraSpec.__table__
COLUMNS = tuple(column.name for column in FLAVORS.columns)


@writer
def flavor_create(context, values, extra_specs=None):
    """Insert a flavor and its extra specs in one transaction; the flavor as a dict.

    Raises ``FlavorIdExists`` or ``FlavorExists`` (name) when a live flavor has them.
    """
    for column, error in (("flavorid", _id_exists), ("name", _name_exists)):
        if _live_id_by(context, FLAVORS.c[column], values[column]) is not None:
            raise error(values)
    try:
        flavor_id = context.session.execute(
            sa.insert(FLAVORS).values(created_at=timeutils.utcnow(), deleted=0, **values)
        ).inserted_primary_key[0]
    except db_exc.DBDuplicateEntry as duplicate:
        # NOTE: another writer took the id or the name between our read and insert.
        raise (_name_exists if "name" in (duplicate.columns or ()) else _id_exists)(values)
    _write_specs(context, flavor_id, extra_specs or {})
    return flavor_get_by_flavor_id(context, values["flavorid"])


def _id_exists(values):
    return exception.FlavorIdExists(flavor_id=values["flavorid"])


def _name_exists(values):
    return exception.FlavorExists(name=values["name"])


def _live_id_by(context, column, value):
    query = sa.select(FLAVORS.c.id).where(column == value, FLAVORS.c.deleted == 0)
    return context.session.scalar(query)


@reader
def flavor_get_by_flavor_id(context, flavorid):
    """The live flavor ``flavorid`` as a dict; ``FlavorNotFound`` when there is none."""
    row = context.session.execute(
        sa.select(FLAVORS).where(FLAVORS.c.flavorid == flavorid, FLAVORS.c.deleted == 0)
    ).first()
    if row is None:
        raise exception.FlavorNotFound(flavor_id=flavorid)
    return _with_specs(context, [row])[0]


@reader
def flavor_get_all(context, is_public=None, min_memory_mb=None, min_root_gb=None):
    """Live flavors, by flavorid; ``is_public`` None for public and private ones."""
    query = sa.select(FLAVORS).where(FLAVORS.c.deleted == 0)
    if is_public is not None:
        query = query.where(FLAVORS.c.is_public == is_public)
    if min_memory_mb is not None:
        query = query.where(FLAVORS.c.memory_mb >= min_memory_mb)
    if min_root_gb is not None:
        query = query.where(FLAVORS.c.root_gb >= min_root_gb)
    return _with_specs(context, context.session.execute(query.order_by(FLAVORS.c.flavorid)))


def _with_specs(context, rows):
    flavors = [dict(row._mapping) for row in rows]
    specs = {flavor["id"]: {} for flavor in flavors}
    if specs:
        query = sa.select(SPECS.c.flavor_id, SPECS.c.key, SPECS.c.value).where(
            SPECS.c.flavor_id.in_(specs), SPECS.c.deleted == 0
        )
        for flavor_id, key, value in context.session.execute(query):
            specs[flavor_id][key] = value
    return [{**flavor, "extra_specs": specs[flavor["id"]]} for flavor in flavors]


@writer
def flavor_destroy(context, flavorid):
    """Soft-delete the live flavor ``flavorid``; ``FlavorNotFound`` when there is none."""
    flavor_id = _flavor_id(context, flavorid)
    context.session.execute(
        sa.update(FLAVORS)
        .where(FLAVORS.c.id == flavor_id)
        .values(deleted=flavor_id, deleted_at=timeutils.utcnow())
    )


def _flavor_id(context, flavorid):
    flavor_id = _live_id_by(context, FLAVORS.c.flavorid, flavorid)
    if flavor_id is None:
        raise exception.FlavorNotFound(flavor_id=flavorid)
    return flavor_id


@writer
def flavor_extra_specs_update_or_create(context, flavorid, extra_specs):
    """Set ``extra_specs`` (``{key: value}``) on the flavor, keeping its other keys;
    returns the flavor's extra specs after."""
    flavor_id = _flavor_id(context, flavorid)
    _write_specs(context, flavor_id, extra_specs)
    return _specs_of(context, flavor_id)


def _write_specs(context, flavor_id, extra_specs):
    now = timeutils.utcnow()
    for key, value in extra_specs.items():
        live = (SPECS.c.flavor_id == flavor_id, SPECS.c.key == key, SPECS.c.deleted == 0)
        updated = context.session.execute(
            sa.update(SPECS).where(*live).values(value=value, updated_at=now)
        )
        if not updated.rowcount:
            context.session.execute(
                sa.insert(SPECS).values(
                    flavor_id=flavor_id, key=key, value=value, created_at=now, deleted=0
                )
            )


def _specs_of(context, flavor_id):
    query = sa.select(SPECS.c.key, SPECS.c.value).where(
        SPECS.c.flavor_id == flavor_id, SPECS.c.deleted == 0
    )
    return dict(context.session.execute(query).all())


@writer
def flavor_extra_specs_delete(context, flavorid, key):
    """Remove one extra spec; ``FlavorExtraSpecsNotFound`` when the flavor lacks it."""
    flavor_id = _flavor_id(context, flavorid)
    spec_id = context.session.scalar(
        sa.select(SPECS.c.id).where(
            SPECS.c.flavor_id == flavor_id, SPECS.c.key == key, SPECS.c.deleted == 0
        )
    )
    if spec_id is None:
        raise exception.FlavorExtraSpecsNotFound(flavor_id=flavorid, extra_specs_key=key)
    context.session.execute(
        sa.update(SPECS)
        .where(SPECS.c.id == spec_id)
        .values(deleted=spec_id, deleted_at=timeutils.utcnow())
    )
