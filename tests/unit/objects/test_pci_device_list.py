"""PciDeviceList.save_batch takes each device's changes and answers only what the
writer adopts; given whole devices (a caller of 1.3 or older) it answers with them as
the database stores them. The conductor reads no row back either way."""

import datetime

import pytest
import sqlalchemy as sa
from oslo_serialization import jsonutils

from pcisim import exception
from pcisim.db import engine, models
from pcisim.objects import base, fields
from pcisim.objects.pci_device import PciDeviceList
from tests import object_factories

A = "11111111-1111-1111-1111-111111111111"
_TIMESTAMPS = ("created_at", "updated_at", "deleted_at")


def _newest_rows():
    table = models.PciDevice.__table__
    with engine.get_engine().connect() as connection:
        rows = connection.execute(sa.select(table).order_by(table.c.id)).mappings()
        return {row["address"]: dict(row) for row in rows}


def _as_row(device):
    """A device's fields as column values, to compare with a row."""
    values = {name: getattr(device, name) for name in device.fields}
    values.update((name, base.naive_utc(values[name])) for name in _TIMESTAMPS)
    values["extra_info"] = jsonutils.dumps(values["extra_info"])
    return values


def _assert_stored(device, row):
    values = _as_row(device)
    for name, value in row.items():
        if isinstance(value, datetime.datetime):
            # MariaDB keeps whole seconds of what was written.
            assert abs(values[name] - value) < datetime.timedelta(seconds=1), name
        elif name == "deleted":
            assert values[name] is bool(value)
        elif name == "extra_info":
            assert jsonutils.loads(values[name]) == jsonutils.loads(value or "{}")
        else:
            assert values[name] == value, name


def test_save_batch_given_whole_devices_answers_with_them_as_stored(db, ctxt):
    node = object_factories.compute_node(ctxt)
    kept = [object_factories.vf(ctxt, node, f"0000:81:00.{f}") for f in (1, 2, 3)]
    kept[0].status, kept[0].instance_uuid, kept[0].request_id = "claimed", A, A
    kept[1].extra_info = {"capabilities": "rx,tx"}
    kept[2].status = "removed"
    # A device saved through a list keeps the fields it never set unset.
    pf = object_factories.new_pf(ctxt, node, "0000:83:00.0")
    PciDeviceList(ctxt, objects=[pf]).save()
    pf.status = "unavailable"
    batch = PciDeviceList(ctxt, objects=[*kept, pf, object_factories.new_pf(ctxt, node)])

    stored = PciDeviceList.save_batch(ctxt, node.id, batch)

    rows = _newest_rows()
    assert sorted(device.address for device in stored) == sorted(rows)
    for device in stored:
        _assert_stored(device, rows[device.address])
        assert not device.obj_what_changed()
    assert kept[0].obj_what_changed() == {"status", "instance_uuid", "request_id"}


def test_saved_devices_take_what_the_database_decided(db, ctxt):
    node = object_factories.compute_node(ctxt)
    pfs = [object_factories.new_pf(ctxt, node, a) for a in ("0000:82:00.0", "0000:83:00.0")]
    devices = PciDeviceList(ctxt, objects=pfs)
    devices.save()
    devices[0].status = "unavailable"
    devices[1].status = "removed"

    devices.save()

    rows = _newest_rows()
    for device in devices:
        row = rows[device.address]
        assert (device.id, device.status, device.deleted) == (
            row["id"],
            row["status"],
            bool(row["deleted"]),
        )
        updated_at = base.naive_utc(device.updated_at)
        assert abs(updated_at - row["updated_at"]) < datetime.timedelta(seconds=1)
        assert not device.obj_what_changed()


def _archive(address):
    table = models.PciDevice.__table__
    with engine.get_engine().begin() as connection:
        connection.execute(sa.delete(table).where(table.c.address == address))


def test_save_batch_answers_only_new_ids_the_time_and_the_rows_not_found(db, ctxt):
    node = object_factories.compute_node(ctxt)
    kept, gone, removed = (object_factories.vf(ctxt, node, f"0000:81:00.{f}") for f in (1, 2, 3))
    _archive(gone.address)
    claim = {"status": "claimed", "instance_uuid": A, "request_id": A}
    changes = {
        "create": [PciDeviceList.changes_of([object_factories.new_pf(ctxt, node)])[0]["create"][0]],
        "update": {kept.address: claim, gone.address: claim},
        "destroy": [removed.address],
    }

    answer = PciDeviceList.save_batch(ctxt, node.id, jsonutils.dumps(changes))

    rows = _newest_rows()
    assert set(answer) == {"at", "created", "missing"}
    assert answer["created"] == {"0000:82:00.0": rows["0000:82:00.0"]["id"]}
    assert answer["missing"] == [gone.address]
    at = base.naive_utc(fields.DateTimeField().from_primitive(None, "at", answer["at"]))
    for address, column in ((kept.address, "updated_at"), (removed.address, "deleted_at")):
        assert abs(at - rows[address][column]) < datetime.timedelta(seconds=1)
    assert rows[kept.address]["status"] == "claimed"
    assert rows[removed.address]["deleted"] == rows[removed.address]["id"]
    assert gone.address not in rows


def test_a_new_device_arriving_with_a_value_its_field_refuses_is_invalid_and_nothing_is_written(
    db, ctxt
):
    node = object_factories.compute_node(ctxt)
    kept = object_factories.vf(ctxt, node)
    (new,) = PciDeviceList.changes_of([object_factories.new_pf(ctxt, node)])[0]["create"]
    changes = {"create": [{**new, "numa_node": "zero"}], "update": {kept.address: {"label": "x"}}}

    with pytest.raises(exception.InvalidInput, match="0000:82:00.0: numa_node"):
        PciDeviceList.save_batch(ctxt, node.id, jsonutils.dumps(changes))

    assert [row["label"] for row in _newest_rows().values()] == [kept.label]


def test_a_new_device_arriving_without_required_fields_is_refused_naming_them(db, ctxt):
    node = object_factories.compute_node(ctxt)

    with pytest.raises(exception.InvalidInput, match="vendor_id, product_id"):
        new = jsonutils.dumps({"create": [{"address": "0000:82:00.0"}]})
        PciDeviceList.save_batch(ctxt, node.id, new)

    assert _newest_rows() == {}


@pytest.mark.parametrize(
    "changes",
    [
        "[]",
        '{"create": {}}',
        '{"update": []}',
        '{"insert": []}',
        '{"update": {"0000:81:00.1": "claimed"}}',
        "{not json",
        {"create": []},
    ],
)
def test_changes_not_of_the_compact_shape_are_refused(db, ctxt, changes):
    node = object_factories.compute_node(ctxt)
    with pytest.raises(exception.InvalidInput, match="PCI device changes"):
        PciDeviceList.save_batch(ctxt, node.id, changes)


def test_a_device_created_and_one_removed_at_the_same_address_both_take_their_write(db, ctxt):
    node = object_factories.compute_node(ctxt)
    old = object_factories.new_pf(ctxt, node)
    PciDeviceList(ctxt, objects=[old]).save()
    old.status = "removed"
    new = object_factories.new_pf(ctxt, node)

    PciDeviceList(ctxt, objects=[old, new]).save()

    assert (old.status, old.deleted, new.deleted) == ("deleted", True, False)
    assert new.id != old.id and not new.obj_what_changed()
    live = PciDeviceList.get_by_compute_node(ctxt, node.id)
    assert [device.id for device in live] == [new.id]
