"""pci_device_batch_save beyond its basic contract (see test_pci_device_api.py): what it
reports having stored, devices written many to a statement, and concurrent writers."""

import datetime
import threading

import pytest
import sqlalchemy as sa

from pcisim import context as pcisim_context
from pcisim import exception
from pcisim.db import api, engine, models
from tests.unit.db import factories

A, B = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
FREE = {"status": "available", "instance_uuid": None}
CLAIMED_BY_A = {"status": "claimed", "instance_uuid": A}
CLAIMED_BY_B = {"status": "claimed", "instance_uuid": B}
ADDRESSES = [f"0000:81:00.{function}" for function in range(1, 6)]


def _rows():
    """Every device row, live or not, by address (the newest row of an address)."""
    table = models.PciDevice.__table__
    with engine.get_engine().connect() as connection:
        rows = connection.execute(sa.select(table).order_by(table.c.id)).mappings()
        return {row["address"]: dict(row) for row in rows}


def _archive(address):
    """Take a device's row away, as an archive run of the wrong kind did."""
    table = models.PciDevice.__table__
    with engine.get_engine().begin() as connection:
        connection.execute(sa.delete(table).where(table.c.address == address))


def _near(stored, reported):
    """A timestamp as reported against the column (MariaDB keeps whole seconds)."""
    return abs(stored - reported) < datetime.timedelta(seconds=1)


@pytest.fixture(params=["executemany", "row by row"])
def statements(request, db, monkeypatch):
    """Both ways of writing devices of one shape: one executemany per group (with a
    savepoint, undone and replayed row by row when its row count is short), and one
    statement per device where the driver's executemany row count cannot be trusted."""
    dialect = engine.get_engine().dialect
    monkeypatch.setattr(dialect, "supports_sane_multi_rowcount", request.param == "executemany")
    return request.param


# ------------------------------------------------------------- what it reports


def test_created_devices_are_reported_with_their_rows(db, ctxt):
    node = factories.node_with_devices(ctxt)

    result = api.pci_device_batch_save(
        ctxt, node.id, create=[factories.new_device_values(address) for address in ADDRESSES[:3]]
    )

    rows = _rows()
    assert sorted(result.created) == ADDRESSES[:3]
    for address, reported in result.created.items():
        stored = rows[address]
        assert reported["id"] == stored["id"]
        assert _near(stored["created_at"], reported["created_at"])
        same = {name: value for name, value in stored.items() if name != "created_at"}
        # a column the batch did not write is NULL
        assert {name: reported.get(name) for name in same} == same


def test_created_devices_get_their_ids_without_insert_returning(db, ctxt, monkeypatch):
    dialect = engine.get_engine().dialect
    monkeypatch.setattr(dialect, "insert_returning", False)
    monkeypatch.setattr(dialect, "insert_executemany_returning", False)
    node = factories.node_with_devices(ctxt)

    for addresses in (ADDRESSES[:1], ADDRESSES[1:]):
        result = api.pci_device_batch_save(
            ctxt, node.id, create=[factories.new_device_values(address) for address in addresses]
        )
        assert {a: row["id"] for a, row in result.created.items()} == {
            address: _rows()[address]["id"] for address in addresses
        }


def test_updated_devices_are_reported_with_what_was_set(db, ctxt):
    node = factories.node_with_devices(ctxt, *ADDRESSES[:2])

    result = api.pci_device_batch_save(ctxt, node.id, update={ADDRESSES[0]: CLAIMED_BY_A})

    stored = _rows()[ADDRESSES[0]]
    reported = result.updated[ADDRESSES[0]]
    assert reported.keys() == {"status", "instance_uuid", "updated_at"}
    assert (stored["status"], stored["instance_uuid"]) == ("claimed", A)
    assert _near(stored["updated_at"], reported["updated_at"])
    assert _rows()[ADDRESSES[1]]["updated_at"] is None


def test_destroyed_devices_are_soft_deleted_as_reported(db, ctxt):
    node = factories.node_with_devices(ctxt, *ADDRESSES[:2])

    result = api.pci_device_batch_save(ctxt, node.id, destroy=[ADDRESSES[0], ADDRESSES[0]])

    stored = _rows()[ADDRESSES[0]]
    reported = result.destroyed[ADDRESSES[0]]
    assert (stored["deleted"], stored["status"]) == (stored["id"], "deleted")
    assert (reported["deleted"], reported["status"]) == (True, "deleted")
    assert _near(stored["deleted_at"], reported["deleted_at"])
    assert _near(stored["updated_at"], reported["updated_at"])
    assert list(result.destroyed) == [ADDRESSES[0]] and result.missing == []
    assert _rows()[ADDRESSES[1]]["deleted"] == 0


def test_an_expected_holder_must_name_status_and_instance(db, ctxt):
    node = factories.node_with_devices(ctxt, ADDRESSES[0])

    with pytest.raises(exception.InvalidInput, match="instance_uuid"):
        api.pci_device_batch_save(
            ctxt,
            node.id,
            update={ADDRESSES[0]: CLAIMED_BY_A},
            expected={ADDRESSES[0]: {"status": "available"}},
        )


# -------------------------------------------------- many devices of one shape


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_missing_devices_among_many_are_told_apart(db, ctxt, statements, guarded):
    node = factories.node_with_devices(ctxt, *ADDRESSES)
    for address in (ADDRESSES[1], ADDRESSES[3]):
        _archive(address)
    expected = dict.fromkeys(ADDRESSES, FREE) if guarded else None

    result = api.pci_device_batch_save(
        ctxt, node.id, update=dict.fromkeys(ADDRESSES, CLAIMED_BY_A), expected=expected
    )

    assert result.missing == [ADDRESSES[1], ADDRESSES[3]]
    assert sorted(result.updated) == [ADDRESSES[0], ADDRESSES[2], ADDRESSES[4]]
    rows = _rows()
    assert {address: rows[address]["instance_uuid"] for address in rows} == dict.fromkeys(
        result.updated, A
    )


def test_missing_devices_among_many_destroyed_are_told_apart(db, ctxt, statements):
    node = factories.node_with_devices(ctxt, *ADDRESSES)
    _archive(ADDRESSES[2])

    result = api.pci_device_batch_save(
        ctxt, node.id, destroy=ADDRESSES, expected=dict.fromkeys(ADDRESSES, FREE)
    )

    assert result.missing == [ADDRESSES[2]]
    assert sorted(result.destroyed) == [a for a in ADDRESSES if a != ADDRESSES[2]]
    assert api.pci_device_get_all_by_node(ctxt, node.id) == []
    assert {row["deleted"] == row["id"] for row in _rows().values()} == {True}


def test_a_conflict_among_many_writes_nothing(db, ctxt, statements):
    node = factories.node_with_devices(ctxt, *ADDRESSES)
    _archive(ADDRESSES[0])
    api.pci_device_batch_save(ctxt, node.id, update={ADDRESSES[3]: CLAIMED_BY_B})
    before = _rows()

    with pytest.raises(exception.PciDeviceConflict) as raised:
        api.pci_device_batch_save(
            ctxt,
            node.id,
            create=[factories.new_device_values("0000:82:00.0")],
            update=dict.fromkeys(ADDRESSES[:4], CLAIMED_BY_A),
            destroy=[ADDRESSES[4]],
            expected=dict.fromkeys(ADDRESSES, FREE),
        )

    assert raised.value.kwargs["addresses"] == [ADDRESSES[3]]
    assert raised.value.kwargs["details"] == (
        f"{ADDRESSES[3]}: expected available, found claimed by {B}"
    )
    assert _rows() == before


def test_a_retry_of_many_writes_that_landed_is_no_conflict(db, ctxt, statements):
    node = factories.node_with_devices(ctxt, *ADDRESSES)
    claim = {
        "update": dict.fromkeys(ADDRESSES[:4], CLAIMED_BY_A),
        "destroy": [ADDRESSES[4]],
        "expected": dict.fromkeys(ADDRESSES, FREE),
    }
    api.pci_device_batch_save(ctxt, node.id, **claim)
    landed = _rows()

    result = api.pci_device_batch_save(ctxt, node.id, **claim)

    assert sorted(result.updated) == ADDRESSES[:4]
    assert result.missing == [ADDRESSES[4]] and result.destroyed == {}
    assert {a: (r["status"], r["instance_uuid"]) for a, r in _rows().items()} == {
        a: (r["status"], r["instance_uuid"]) for a, r in landed.items()
    }


def test_devices_of_several_shapes_are_all_written(db, ctxt, statements):
    node = factories.node_with_devices(ctxt, *ADDRESSES)
    update = {
        ADDRESSES[0]: {"status": "unavailable"},
        ADDRESSES[1]: {**CLAIMED_BY_A, "request_id": A},
        ADDRESSES[2]: {"status": "unavailable"},
        ADDRESSES[3]: {**CLAIMED_BY_A, "request_id": A},
    }

    result = api.pci_device_batch_save(
        ctxt,
        node.id,
        update=update,
        destroy=[ADDRESSES[4]],
        expected={ADDRESSES[1]: FREE, ADDRESSES[3]: FREE},
    )

    assert sorted(result.updated) == ADDRESSES[:4] and list(result.destroyed) == [ADDRESSES[4]]
    rows = _rows()
    for address, values in update.items():
        assert {name: rows[address][name] for name in values} == values


# ------------------------------------------------------------ concurrent writers


def _in_thread(target):
    outcome = {}

    def run():
        try:
            outcome["result"] = target()
        except Exception as error:  # noqa: BLE001  (handed to the test thread)
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_second_writer_waits_for_the_first_and_then_conflicts(db, ctxt):
    node = factories.node_with_devices(ctxt, *ADDRESSES[:2])
    claim = {ADDRESSES[0]: CLAIMED_BY_A, ADDRESSES[1]: CLAIMED_BY_A}
    expected = dict.fromkeys(ADDRESSES[:2], FREE)

    with engine.context_manager.writer.using(ctxt):
        api.pci_device_batch_save(ctxt, node.id, update=claim, expected=expected)
        second, outcome = _in_thread(
            lambda: api.pci_device_batch_save(
                pcisim_context.get_admin_context(),
                node.id,
                update=dict.fromkeys(ADDRESSES[:2], CLAIMED_BY_B),
                expected=expected,
            )
        )
        second.join(0.5)
        assert second.is_alive(), "the second writer did not wait for the first"
    second.join(30)

    assert isinstance(outcome.get("error"), exception.PciDeviceConflict), outcome
    assert outcome["error"].kwargs["addresses"] == ADDRESSES[:2]
    assert {_rows()[address]["instance_uuid"] for address in ADDRESSES[:2]} == {A}


def test_a_row_freed_between_the_update_and_the_check_is_written(db, ctxt):
    """On PostgreSQL an UPDATE that matches nothing locks nothing, so another writer
    can change the row before the locking read that classifies the miss."""
    if db.backend != "postgresql":
        pytest.skip("MariaDB keeps the row locked; SQLite runs one writer at a time")
    node = factories.node_with_devices(ctxt, ADDRESSES[0])
    api.pci_device_batch_save(ctxt, node.id, update={ADDRESSES[0]: CLAIMED_BY_B})
    sa_engine, table, seen = engine.get_engine(), models.PciDevice.__table__, []

    def free_it_once(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement.split()[0] + (" FOR UPDATE" if "FOR UPDATE" in statement else ""))
        if seen == ["UPDATE"]:
            with sa_engine.connect() as other:
                other.execute(sa.update(table).values(FREE))
                other.commit()

    sa.event.listen(sa_engine, "after_cursor_execute", free_it_once)
    try:
        result = api.pci_device_batch_save(
            ctxt, node.id, update={ADDRESSES[0]: CLAIMED_BY_A}, expected={ADDRESSES[0]: FREE}
        )
    finally:
        sa.event.remove(sa_engine, "after_cursor_execute", free_it_once)

    assert seen[:1] + seen[-2:] == ["UPDATE", "SELECT FOR UPDATE", "UPDATE"]
    assert list(result.updated) == [ADDRESSES[0]]
    assert _rows()[ADDRESSES[0]]["instance_uuid"] == A
