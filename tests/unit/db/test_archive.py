"""archive_deleted_rows moves whole soft-deleted trees, found by foreign key, into the
shadow tables; purge_shadow_tables empties them. A device row naming a deleted instance
is not that instance's residue and stays where it is (Nova bug 1899541)."""

import datetime

import pytest
import sqlalchemy as sa

from pcisim import exception
from pcisim.db import api, archive, engine, models
from tests.unit.db import factories

ADDRESS = "0000:81:00.1"
OWNED_BY_INSTANCE = (
    "instance_extra",
    "instance_actions",
    "instance_actions_events",
    "instance_faults",
)
INSTANCE_TREE = ("instances", *OWNED_BY_INSTANCE)
# The columns archiving sets on a row it moves together with its parent.
DELETION_MARKS = ("deleted", "deleted_at")


def _table(name, shadow=False):
    table = models.Base.metadata.tables[name]
    return models.shadow_of(table) if shadow else table


def _rows(name, shadow=False):
    table = _table(name, shadow)
    with engine.get_engine().connect() as connection:
        query = sa.select(table).order_by(table.c.id)
        return [dict(row._mapping) for row in connection.execute(query)]


def _counts(shadow=False):
    return {table.name: len(_rows(table.name, shadow)) for table in models.LIVE_TABLES}


def _instance_tree(uuid, shadow=False):
    """The rows of an instance's tree by live table name, read from live or shadow."""
    with engine.get_engine().connect() as connection:

        def rows(name, condition):
            table = _table(name, shadow)
            query = sa.select(table).where(condition(table.c)).order_by(table.c.id)
            return [dict(row._mapping) for row in connection.execute(query)]

        tree = {"instances": rows("instances", lambda c: c.uuid == uuid)}
        for name in ("instance_extra", "instance_actions", "instance_faults"):
            tree[name] = rows(name, lambda c: c.instance_uuid == uuid)
        action_ids = [action["id"] for action in tree["instance_actions"]]
        tree["instance_actions_events"] = rows(
            "instance_actions_events", lambda c: c.action_id.in_(action_ids)
        )
    return tree


def _without_marks(tree):
    return {
        name: [{k: v for k, v in row.items() if k not in DELETION_MARKS} for row in rows]
        for name, rows in tree.items()
    }


def _orphans():
    """Live rows whose owner is not a live row."""
    orphans = []
    with engine.get_engine().connect() as connection:
        for table in models.LIVE_TABLES:
            for fk in table.foreign_keys:
                owner = sa.select(fk.column).where(fk.column == fk.parent).exists()
                query = sa.select(table.c.id).where(~owner)
                orphans += [(table.name, row_id) for row_id in connection.scalars(query)]
    return orphans


def _split_trees(uuids):
    """Instances whose tree is partly live and partly in the shadow tables."""
    split = []
    for uuid in uuids:
        places = {
            shadow
            for shadow in (False, True)
            for rows in _instance_tree(uuid, shadow).values()
            if rows
        }
        if places == {False, True}:
            split.append(uuid)
    return split


def _deleted_instance_holding_a_device(ctxt):
    """A soft-deleted instance with full history, whose device is still allocated."""
    node = factories.compute_node(ctxt)
    inst = factories.instance_with_history(ctxt)
    factories.pci_device(ctxt, node.id, ADDRESS, status="allocated", instance_uuid=inst.uuid)
    api.instance_destroy(ctxt, inst.uuid)
    return node, inst


def _deleted_instances_with_history(ctxt, count):
    uuids = [factories.instance_with_history(ctxt).uuid for _ in range(count)]
    for uuid in uuids:
        api.instance_destroy(ctxt, uuid)
    return uuids


def _mixed_residue(ctxt):
    """Something to archive in every table, next to live rows that must stay."""
    live_node = factories.compute_node(ctxt, node="live")
    factories.pci_device(ctxt, live_node.id, "0000:81:00.1")
    factories.deleted_device(ctxt, live_node.id, "0000:81:00.2")
    gone_node = factories.compute_node(ctxt, node="gone")
    factories.pci_device(ctxt, gone_node.id, "0000:81:00.1")
    factories.pci_device(ctxt, gone_node.id, "0000:81:00.2")
    api.compute_node_delete(ctxt, gone_node.id)
    factories.instance_with_history(ctxt)
    return _deleted_instances_with_history(ctxt, 2)


# ------------------------------------------------------- what moves and what stays


def test_allocated_device_of_a_deleted_instance_stays_unchanged(db, ctxt):
    _deleted_instance_holding_a_device(ctxt)
    devices = _rows("pci_devices")

    archive.archive_deleted_rows(ctxt)

    assert _rows("pci_devices") == devices
    assert _rows("pci_devices", shadow=True) == []


def test_deleted_instance_and_what_it_owns_leave_the_live_tables(db, ctxt):
    _, inst = _deleted_instance_holding_a_device(ctxt)
    assert all(_instance_tree(inst.uuid).values())

    archive.archive_deleted_rows(ctxt)

    assert _instance_tree(inst.uuid) == {name: [] for name in INSTANCE_TREE}


def test_deleted_instance_and_what_it_owns_reach_the_shadow_tables_as_they_were(db, ctxt):
    _, inst = _deleted_instance_holding_a_device(ctxt)
    live = _instance_tree(inst.uuid)

    archive.archive_deleted_rows(ctxt)

    shadow = _instance_tree(inst.uuid, shadow=True)
    assert shadow["instances"] == live["instances"]
    assert _without_marks(shadow) == _without_marks(live)


def test_device_of_an_archived_instance_can_still_be_freed(db, ctxt):
    node, inst = _deleted_instance_holding_a_device(ctxt)
    device_id = api.pci_device_get_by_addr(ctxt, node.id, ADDRESS).id
    archive.archive_deleted_rows(ctxt)

    freed = api.pci_device_update(
        ctxt, node.id, ADDRESS, {"status": "available", "instance_uuid": None}
    )

    assert (freed.id, freed.status, freed.instance_uuid) == (device_id, "available", None)
    assert api.pci_device_get_all_by_instance_uuid(ctxt, inst.uuid) == []


def test_soft_deleted_devices_are_archived_and_live_ones_stay(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    removed = factories.deleted_device(ctxt, node.id, "0000:81:00.2")
    live_before = [row for row in _rows("pci_devices") if row["deleted"] == 0]
    removed_row = [row for row in _rows("pci_devices") if row["id"] == removed.id]

    result = archive.archive_deleted_rows(ctxt)

    assert result.rows == {"pci_devices": 1}
    assert _rows("pci_devices") == live_before
    assert _rows("pci_devices", shadow=True) == removed_row


def test_deleted_compute_node_takes_its_devices_with_it(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    factories.pci_device(ctxt, node.id, "0000:81:00.2")
    api.compute_node_delete(ctxt, node.id)

    result = archive.archive_deleted_rows(ctxt)

    assert result.rows == {"compute_nodes": 1, "pci_devices": 2}
    assert (_rows("compute_nodes"), _rows("pci_devices")) == ([], [])
    assert [row["id"] for row in _rows("compute_nodes", shadow=True)] == [node.id]
    assert {row["compute_node_id"] for row in _rows("pci_devices", shadow=True)} == {node.id}


def test_rows_moved_with_their_parent_are_marked_deleted_when_it_was(db, ctxt):
    (uuid,) = _deleted_instances_with_history(ctxt, 1)

    archive.archive_deleted_rows(ctxt)

    shadow = _instance_tree(uuid, shadow=True)
    (root,) = shadow["instances"]
    owned = [row for name in OWNED_BY_INSTANCE for row in shadow[name]]
    assert len(owned) == len(OWNED_BY_INSTANCE)
    assert all(row["deleted"] != 0 for row in owned)
    assert {row["deleted_at"] for row in owned} == {root["deleted_at"]}


def test_only_roots_deleted_before_the_date_are_archived(db, ctxt):
    cutoff = datetime.datetime(2020, 1, 2)
    old, at_cutoff, recent = (factories.instance(ctxt) for _ in range(3))
    for inst, deleted_at in (
        (old, datetime.datetime(2020, 1, 1)),
        (at_cutoff, cutoff),
        (recent, datetime.datetime(2020, 1, 3)),
    ):
        api.instance_destroy(ctxt, inst.uuid)
        factories.set_deleted_at("instances", inst.id, deleted_at)

    result = archive.archive_deleted_rows(ctxt, before=cutoff)

    assert result.instance_uuids == [old.uuid]
    assert result.rows == {"instances": 1, "instance_extra": 1}
    assert [row["uuid"] for row in _rows("instances")] == [at_cutoff.uuid, recent.uuid]


def test_shadow_counts_equal_the_rows_removed_and_the_result(db, ctxt):
    _mixed_residue(ctxt)
    live_before = _counts()

    result = archive.archive_deleted_rows(ctxt)

    removed = {name: count - _counts()[name] for name, count in live_before.items()}
    assert _counts(shadow=True) == removed
    assert result.rows == {name: count for name, count in removed.items() if count}
    assert result.total == sum(removed.values()) > 0


def test_result_lists_exactly_the_archived_instances(db, ctxt):
    deleted = _deleted_instances_with_history(ctxt, 2)
    factories.instance_with_history(ctxt)

    result = archive.archive_deleted_rows(ctxt)

    assert sorted(result.instance_uuids) == sorted(deleted)
    assert sorted(row["uuid"] for row in _rows("instances", shadow=True)) == sorted(deleted)


def test_archiving_with_nothing_deleted_moves_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id)
    factories.instance_with_history(ctxt)
    live_before = _counts()

    result = archive.archive_deleted_rows(ctxt)

    assert (result.total, result.rows, result.instance_uuids) == (0, {}, [])
    assert _counts() == live_before


# ------------------------------------------------------------------ the budget


def test_budget_moves_at_most_max_rows_per_call(db, ctxt):
    node = factories.compute_node(ctxt)
    for i in range(6):
        factories.pci_device(ctxt, node.id, f"0000:81:00.{i}")
    for i in range(4):
        api.pci_device_destroy(ctxt, node.id, f"0000:81:00.{i}")

    totals = [archive.archive_deleted_rows(ctxt, max_rows=2).total for _ in range(3)]

    assert totals == [2, 2, 0]
    assert len(_rows("pci_devices")) == 2


def test_budget_counts_an_instance_with_its_extra(db, ctxt):
    uuids = [factories.instance(ctxt).uuid for _ in range(6)]
    for uuid in uuids[:4]:
        api.instance_destroy(ctxt, uuid)

    results = [archive.archive_deleted_rows(ctxt, max_rows=4) for _ in range(3)]

    assert [result.total for result in results] == [4, 4, 0]
    assert [result.instance_uuids for result in results] == [uuids[:2], uuids[2:4], []]


def test_budget_that_cannot_take_a_second_tree_moves_one_whole_tree(db, ctxt):
    first, *_ = _deleted_instances_with_history(ctxt, 3)

    result = archive.archive_deleted_rows(ctxt, max_rows=7)

    assert result.rows == dict.fromkeys(INSTANCE_TREE, 1)
    assert result.instance_uuids == [first]


def test_budget_smaller_than_a_tree_still_moves_one_whole_tree(db, ctxt):
    first, *_ = _deleted_instances_with_history(ctxt, 3)

    result = archive.archive_deleted_rows(ctxt, max_rows=3)

    assert result.rows == dict.fromkeys(INSTANCE_TREE, 1)
    assert result.instance_uuids == [first]


def test_archiving_in_small_steps_never_leaves_part_of_a_tree_behind(db, ctxt):
    uuids = _deleted_instances_with_history(ctxt, 3)
    factories.instance_with_history(ctxt)

    totals = []
    while not totals or totals[-1]:
        totals.append(archive.archive_deleted_rows(ctxt, max_rows=3).total)
        assert _split_trees(uuids) == []
        assert _orphans() == []

    assert totals == [5, 5, 5, 0]


@pytest.mark.parametrize("max_rows", [0, -1, "3", True, archive.MAX_ROWS + 1])
def test_budget_that_is_not_an_integer_from_1_to_max_rows_is_refused(db, ctxt, max_rows):
    node = factories.compute_node(ctxt)
    factories.deleted_device(ctxt, node.id)

    with pytest.raises(exception.InvalidArchiveBudget):
        archive.archive_deleted_rows(ctxt, max_rows=max_rows)

    assert len(_rows("pci_devices")) == 1


# ------------------------------------------------------------------- purging


def test_purge_without_a_date_empties_the_shadow_tables(db, ctxt):
    _mixed_residue(ctxt)
    archive.archive_deleted_rows(ctxt)
    shadow = {
        models.SHADOW_PREFIX + name: count for name, count in _counts(shadow=True).items() if count
    }
    live = _counts()

    purged = archive.purge_shadow_tables(ctxt)

    assert purged == shadow
    assert set(_counts(shadow=True).values()) == {0}
    assert _counts() == live


def test_purge_before_a_date_removes_only_trees_deleted_earlier(db, ctxt):
    old, recent = _deleted_instances_with_history(ctxt, 2)
    old_id = api.instance_get_by_uuid(ctxt, old, read_deleted=True).id
    factories.set_deleted_at("instances", old_id, datetime.datetime(2020, 1, 1))
    archive.archive_deleted_rows(ctxt)
    recent_tree = _instance_tree(recent, shadow=True)

    purged = archive.purge_shadow_tables(ctxt, before=datetime.datetime(2020, 1, 2))

    assert purged == {models.SHADOW_PREFIX + name: 1 for name in INSTANCE_TREE}
    assert _instance_tree(old, shadow=True) == {name: [] for name in INSTANCE_TREE}
    assert _instance_tree(recent, shadow=True) == recent_tree


def test_purging_empty_shadow_tables_returns_nothing(db, ctxt):
    assert archive.purge_shadow_tables(ctxt) == {}
