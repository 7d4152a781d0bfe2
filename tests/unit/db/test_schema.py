"""The schema: ownership is declared, shadows mirror live tables, migrations match models."""

import pytest
import sqlalchemy as sa
from alembic import autogenerate
from alembic import migration as alembic_migration

from pcisim.db import engine, models

BOOKKEEPING = ("created_at", "updated_at", "deleted_at", "deleted")
ALL_TABLES = (*models.LIVE_TABLES, *models.SHADOW_TABLES.values())


def unclassified_instance_references(tables, reference_only):
    """Tables with an ``instance_uuid`` column that is neither a foreign key to
    ``instances.uuid`` (owned by the instance, archived with it) nor declared
    reference-only. Archiving could not tell whether their rows are an instance's."""
    return sorted(
        table.name
        for table in tables
        if "instance_uuid" in table.c
        and not _owned_by_instance(table)
        and table.name not in reference_only
    )


def _owned_by_instance(table):
    return any(fk.target_fullname == "instances.uuid" for fk in table.c.instance_uuid.foreign_keys)


def _throwaway_tables(*extra_columns):
    metadata = sa.MetaData()
    sa.Table("instances", metadata, sa.Column("uuid", sa.String(36), primary_key=True))
    sa.Table("instance_tags", metadata, sa.Column("id", sa.Integer, primary_key=True))
    tags = metadata.tables["instance_tags"]
    for column in extra_columns:
        tags.append_column(column)
    return metadata.sorted_tables


# --------------------------------------------------------------------- ownership


def test_every_table_naming_an_instance_is_classified():
    assert (
        unclassified_instance_references(models.LIVE_TABLES, models.INSTANCE_REFERENCE_ONLY) == []
    )


def test_checker_flags_a_new_table_naming_an_instance_without_classification():
    tables = _throwaway_tables(sa.Column("instance_uuid", sa.String(36)))

    assert unclassified_instance_references(tables, frozenset()) == ["instance_tags"]


def test_checker_accepts_a_table_owned_through_a_foreign_key():
    tables = _throwaway_tables(
        sa.Column("instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"))
    )

    assert unclassified_instance_references(tables, frozenset()) == []


def test_checker_accepts_a_table_declared_reference_only():
    tables = _throwaway_tables(sa.Column("instance_uuid", sa.String(36)))

    assert unclassified_instance_references(tables, frozenset({"instance_tags"})) == []


def test_pci_devices_instance_uuid_has_no_foreign_key():
    assert models.PciDevice.__table__.c.instance_uuid.foreign_keys == set()


def test_reference_only_tables_exist_and_are_not_owned_by_an_instance():
    for name in models.INSTANCE_REFERENCE_ONLY:
        table = models.Base.metadata.tables[name]
        assert table in models.LIVE_TABLES
        assert "instance_uuid" in table.c
        assert not _owned_by_instance(table)


# ----------------------------------------------------------------------- shadows


@pytest.mark.parametrize("table", models.LIVE_TABLES, ids=lambda table: table.name)
def test_shadow_has_the_same_columns_and_types(table):
    shadow = models.Base.metadata.tables[models.SHADOW_PREFIX + table.name]

    assert [(c.name, type(c.type)) for c in shadow.c] == [(c.name, type(c.type)) for c in table.c]


@pytest.mark.parametrize("shadow", models.SHADOW_TABLES.values(), ids=lambda table: table.name)
def test_shadow_has_no_foreign_keys_unique_constraints_or_indexes(shadow):
    uniques = [c for c in shadow.constraints if isinstance(c, sa.UniqueConstraint)]

    assert (shadow.foreign_keys, uniques, shadow.indexes) == (set(), [], set())


def test_every_live_table_and_only_those_have_a_shadow():
    shadows = {t.name for t in models.Base.metadata.sorted_tables} - {
        t.name for t in models.LIVE_TABLES
    }

    assert shadows == {models.SHADOW_PREFIX + t.name for t in models.LIVE_TABLES}


# -------------------------------------------------------------- migrated database


def test_migrated_database_matches_the_models(db):
    with engine.get_engine().connect() as connection:
        context = alembic_migration.MigrationContext.configure(
            connection, opts={"compare_type": True}
        )
        diff = autogenerate.compare_metadata(context, models.Base.metadata)

    assert diff == []


def test_every_table_has_the_bookkeeping_columns(db):
    inspector = sa.inspect(engine.get_engine())
    expected = {table.name for table in ALL_TABLES}
    assert expected <= set(inspector.get_table_names())

    for name in sorted(expected):
        columns = {c["name"]: c for c in inspector.get_columns(name)}
        assert set(BOOKKEEPING) <= set(columns), name
        for stamp in ("created_at", "updated_at", "deleted_at"):
            assert isinstance(columns[stamp]["type"], sa.DateTime), (name, stamp)
        deleted = columns["deleted"]
        assert isinstance(deleted["type"], sa.Integer), name
        assert deleted["nullable"] is False, name
