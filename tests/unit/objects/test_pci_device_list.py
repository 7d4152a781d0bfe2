"""PciDeviceList.save_batch answers with the devices as the database stores them,
though the conductor no longer reads the rows back."""

import datetime

import sqlalchemy as sa
from oslo_serialization import jsonutils

from pcisim.db import engine, models
from pcisim.objects import base
from pcisim.objects.pci_device import PciDevice, PciDeviceList
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


def _pf(ctxt, node, address="0000:82:00.0"):
    """A new PF with only the fields the tracker sets (no uuid, dev_id, extra_info)."""
    return PciDevice(
        ctxt,
        compute_node_id=node.id,
        address=address,
        vendor_id="8086",
        product_id="1521",
        dev_type="type-PF",
        status="available",
        label="pf",
        numa_node=0,
        parent_addr=None,
        instance_uuid=None,
        request_id=None,
    )


def test_save_batch_answers_with_the_devices_as_stored(db, ctxt):
    node = object_factories.compute_node(ctxt)
    kept = [object_factories.vf(ctxt, node, f"0000:81:00.{f}") for f in (1, 2, 3)]
    kept[0].status, kept[0].instance_uuid, kept[0].request_id = "claimed", A, A
    kept[1].extra_info = {"capabilities": "rx,tx"}
    kept[2].status = "removed"
    # A device saved through a list keeps the fields it never set unset.
    pf = _pf(ctxt, node, "0000:83:00.0")
    PciDeviceList(ctxt, objects=[pf]).save()
    pf.status = "unavailable"
    batch = PciDeviceList(ctxt, objects=[*kept, pf, _pf(ctxt, node)])

    stored = PciDeviceList.save_batch(ctxt, node.id, batch)

    rows = _newest_rows()
    assert sorted(device.address for device in stored) == sorted(rows)
    for device in stored:
        _assert_stored(device, rows[device.address])
        assert not device.obj_what_changed()
    assert kept[0].obj_what_changed() == {"status", "instance_uuid", "request_id"}


def test_saved_devices_take_what_the_database_decided(db, ctxt):
    node = object_factories.compute_node(ctxt)
    devices = PciDeviceList(ctxt, objects=[_pf(ctxt, node), _pf(ctxt, node, "0000:83:00.0")])
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
