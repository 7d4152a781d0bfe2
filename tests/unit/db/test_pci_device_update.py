"""pci_device_update updates one live row or raises; it never inserts."""

import pytest
import sqlalchemy as sa

from pcisim import exception
from pcisim.db import api, engine, models
from tests.unit.db import factories


def _all_device_rows():
    with engine.get_engine().connect() as connection:
        return [
            dict(row._mapping)
            for row in connection.execute(
                sa.select(models.PciDevice.__table__).order_by(models.PciDevice.id)
            )
        ]


def test_update_changes_the_live_row_and_returns_it(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")

    device = api.pci_device_update(
        ctxt, node.id, "0000:81:00.1", {"status": "allocated", "instance_uuid": "i-1"}
    )

    assert (device.status, device.instance_uuid) == ("allocated", "i-1")
    stored = api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1")
    assert (stored.status, stored.instance_uuid) == ("allocated", "i-1")
    assert stored.updated_at is not None


def test_update_of_a_missing_row_raises_and_inserts_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceNotFound) as raised:
        api.pci_device_update(
            ctxt, node.id, "0000:81:00.2", {"status": "available", "instance_uuid": None}
        )

    assert raised.value.kwargs == {"node_id": node.id, "address": "0000:81:00.2"}
    assert _all_device_rows() == before


def test_update_of_a_soft_deleted_row_raises_and_leaves_it_unchanged(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    api.pci_device_destroy(ctxt, node.id, "0000:81:00.1")
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceNotFound):
        api.pci_device_update(ctxt, node.id, "0000:81:00.1", {"status": "available"})

    assert _all_device_rows() == before


def test_update_on_another_node_does_not_touch_a_device_at_the_same_address(db, ctxt):
    node1 = factories.compute_node(ctxt, node="node1")
    node2 = factories.compute_node(ctxt, node="node2")
    factories.pci_device(ctxt, node1.id, "0000:81:00.1")

    with pytest.raises(exception.PciDeviceNotFound):
        api.pci_device_update(ctxt, node2.id, "0000:81:00.1", {"status": "claimed"})

    assert api.pci_device_get_by_addr(ctxt, node1.id, "0000:81:00.1").status == "available"


@pytest.mark.parametrize("field", ["vendor_id", "product_id", "dev_type", "label", "status"])
def test_update_refuses_to_null_a_required_field(db, ctxt, field):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    before = _all_device_rows()

    with pytest.raises(exception.InvalidInput, match=field):
        api.pci_device_update(ctxt, node.id, "0000:81:00.1", {field: None})

    assert _all_device_rows() == before


@pytest.mark.parametrize("field", ["compute_node_id", "address", "id", "deleted"])
def test_update_refuses_to_change_identity_or_bookkeeping(db, ctxt, field):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")

    with pytest.raises(exception.InvalidInput, match=field):
        api.pci_device_update(ctxt, node.id, "0000:81:00.1", {field: 7})


def test_update_refuses_an_unknown_column(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")

    with pytest.raises(exception.InvalidInput, match="no column.*colour"):
        api.pci_device_update(ctxt, node.id, "0000:81:00.1", {"colour": "red"})


def _updates_run(call):
    """The UPDATE statements ``call`` sends to the database, as SQL text."""
    seen = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE"):
            seen.append(statement)

    sa.event.listen(engine.get_engine(), "before_cursor_execute", record)
    try:
        call()
    finally:
        sa.event.remove(engine.get_engine(), "before_cursor_execute", record)
    return seen


def test_update_runs_the_statement_the_batch_save_runs_for_each_device(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    values = {"status": "claimed", "instance_uuid": "i-1"}

    single = _updates_run(lambda: api.pci_device_update(ctxt, node.id, "0000:81:00.1", values))
    batch = _updates_run(
        lambda: api.pci_device_batch_save(ctxt, node.id, update={"0000:81:00.2": values})
    )

    assert len(single) == 1 and single == batch
