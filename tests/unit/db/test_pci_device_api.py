"""Creating, reading, destroying and batch-saving PCI devices through the DB API."""

import pytest
import sqlalchemy as sa

from pcisim import exception
from pcisim.db import api, engine, models
from tests.unit.db import factories


def _all_device_rows():
    with engine.get_engine().connect() as connection:
        table = models.PciDevice.__table__
        return [
            dict(row._mapping) for row in connection.execute(sa.select(table).order_by(table.c.id))
        ]


def _named_as_missing(error):
    """The fields an ``InvalidInput`` from pci_device_create says are missing."""
    message = str(error)
    assert "needs " in message, message
    return message.split("needs ", 1)[1].split(";", 1)[0].split(", ")


def _addresses(devices):
    return [device.address for device in devices]


# ---------------------------------------------------------------------- create


@pytest.mark.parametrize("absent", [True, False], ids=["absent", "none"])
@pytest.mark.parametrize("field", api.PCI_REQUIRED_FIELDS)
def test_create_refuses_a_device_missing_a_required_field(db, ctxt, field, absent):
    node = factories.compute_node(ctxt)
    values = factories.pci_values(node.id)
    if absent:
        del values[field]
    else:
        values[field] = None

    with pytest.raises(exception.InvalidInput) as raised:
        api.pci_device_create(ctxt, values)

    assert _named_as_missing(raised.value) == [field]
    assert _all_device_rows() == []


def test_create_names_every_missing_field(db, ctxt):
    node = factories.compute_node(ctxt)
    values = factories.pci_values(node.id, vendor_id=None, status=None)
    del values["label"]

    with pytest.raises(exception.InvalidInput) as raised:
        api.pci_device_create(ctxt, values)

    assert sorted(_named_as_missing(raised.value)) == ["label", "status", "vendor_id"]


def test_create_stores_the_device_live(db, ctxt):
    node = factories.compute_node(ctxt)

    device = api.pci_device_create(ctxt, factories.pci_values(node.id, "0000:81:00.1"))

    (row,) = _all_device_rows()
    assert row == {**row, **factories.pci_values(node.id, "0000:81:00.1")}
    assert (row["id"], row["deleted"], row["deleted_at"]) == (device.id, 0, None)
    assert row["created_at"] is not None


def test_create_refuses_a_second_live_device_at_the_same_address(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceExists):
        factories.pci_device(ctxt, node.id, "0000:81:00.1", vendor_id="15b3")

    assert _all_device_rows() == before


def test_create_on_an_unknown_compute_node_raises(db, ctxt):
    with pytest.raises(exception.ComputeNodeNotFound) as raised:
        factories.pci_device(ctxt, 4242)

    assert raised.value.kwargs == {"node_id": 4242}
    assert _all_device_rows() == []


def test_create_reuses_the_address_of_a_soft_deleted_device(db, ctxt):
    node = factories.compute_node(ctxt)
    old = factories.deleted_device(ctxt, node.id, "0000:81:00.1")

    new = factories.pci_device(ctxt, node.id, "0000:81:00.1")

    assert new.id != old.id
    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").id == new.id


# ----------------------------------------------------------------------- reads


def test_get_by_addr_returns_the_live_device(db, ctxt):
    node = factories.compute_node(ctxt)
    device = factories.pci_device(ctxt, node.id, "0000:81:00.1")
    factories.pci_device(ctxt, node.id, "0000:81:00.2")

    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").id == device.id


def test_get_by_addr_does_not_return_a_soft_deleted_device(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.deleted_device(ctxt, node.id, "0000:81:00.1")

    with pytest.raises(exception.PciDeviceNotFound):
        api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1")


def test_get_by_id_returns_the_live_device(db, ctxt):
    node = factories.compute_node(ctxt)
    device = factories.pci_device(ctxt, node.id, "0000:81:00.1")

    assert api.pci_device_get_by_id(ctxt, device.id).address == "0000:81:00.1"


def test_get_by_id_does_not_return_a_soft_deleted_device(db, ctxt):
    node = factories.compute_node(ctxt)
    device = factories.deleted_device(ctxt, node.id)

    with pytest.raises(exception.PciDeviceNotFoundById):
        api.pci_device_get_by_id(ctxt, device.id)


def test_get_all_by_node_returns_the_live_devices_of_that_node_only(db, ctxt):
    node1 = factories.compute_node(ctxt, node="node1")
    node2 = factories.compute_node(ctxt, node="node2")
    factories.pci_device(ctxt, node1.id, "0000:81:00.2")
    factories.pci_device(ctxt, node1.id, "0000:81:00.1")
    factories.deleted_device(ctxt, node1.id, "0000:81:00.3")
    factories.pci_device(ctxt, node2.id, "0000:81:00.4")

    devices = api.pci_device_get_all_by_node(ctxt, node1.id)

    assert _addresses(devices) == ["0000:81:00.1", "0000:81:00.2"]


def test_get_all_by_instance_uuid_returns_the_live_devices_it_holds(db, ctxt):
    node = factories.compute_node(ctxt)
    for address, holder in (("0000:81:00.1", "i-1"), ("0000:81:00.2", "i-2")):
        factories.pci_device(ctxt, node.id, address, status="allocated", instance_uuid=holder)
    factories.deleted_device(ctxt, node.id, "0000:81:00.3", instance_uuid="i-1")

    devices = api.pci_device_get_all_by_instance_uuid(ctxt, "i-1")

    assert _addresses(devices) == ["0000:81:00.1"]


# --------------------------------------------------------------------- destroy


def test_destroy_soft_deletes_the_device(db, ctxt):
    node = factories.compute_node(ctxt)
    device = factories.pci_device(ctxt, node.id, "0000:81:00.1")

    api.pci_device_destroy(ctxt, node.id, "0000:81:00.1")

    (row,) = _all_device_rows()
    assert (row["deleted"], row["status"]) == (device.id, "deleted")
    assert row["deleted_at"] is not None


def test_destroy_of_a_missing_device_raises(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceNotFound) as raised:
        api.pci_device_destroy(ctxt, node.id, "0000:81:00.2")

    assert raised.value.kwargs == {"node_id": node.id, "address": "0000:81:00.2"}
    assert _all_device_rows() == before


# ------------------------------------------------------------------ batch save


def test_batch_save_creates_updates_and_destroys_in_one_call(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")

    result = api.pci_device_batch_save(
        ctxt,
        node.id,
        create=[factories.new_device_values("0000:81:00.3")],
        update={"0000:81:00.1": {"status": "claimed"}},
        destroy=["0000:81:00.2"],
    )

    assert [list(r) for r in (result.created, result.updated, result.destroyed)] == [
        ["0000:81:00.3"],
        ["0000:81:00.1"],
        ["0000:81:00.2"],
    ]
    assert result.missing == []
    live = api.pci_device_get_all_by_node(ctxt, node.id)
    assert [(d.address, d.status) for d in live] == [
        ("0000:81:00.1", "claimed"),
        ("0000:81:00.3", "available"),
    ]


def test_batch_save_reports_missing_addresses_and_saves_the_others(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")

    result = api.pci_device_batch_save(
        ctxt,
        node.id,
        update={"0000:81:00.1": {"status": "claimed"}, "0000:81:00.8": {"status": "claimed"}},
        destroy=["0000:81:00.2", "0000:81:00.9"],
    )

    assert result.missing == ["0000:81:00.8", "0000:81:00.9"]
    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").status == "claimed"
    assert _addresses(api.pci_device_get_all_by_node(ctxt, node.id)) == ["0000:81:00.1"]


def test_batch_save_never_inserts_for_a_missing_address(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1")
    before = _all_device_rows()

    result = api.pci_device_batch_save(
        ctxt, node.id, update={"0000:81:00.2": {"status": "available", "instance_uuid": None}}
    )

    assert result.missing == ["0000:81:00.2"]
    assert _all_device_rows() == before


def test_batch_save_writes_nothing_when_one_new_device_is_invalid(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    before = _all_device_rows()

    with pytest.raises(exception.InvalidInput, match="needs label"):
        api.pci_device_batch_save(
            ctxt,
            node.id,
            create=[
                factories.new_device_values("0000:81:00.3"),
                factories.new_device_values("0000:81:00.4", label=None),
            ],
            update={"0000:81:00.1": {"status": "claimed"}},
            destroy=["0000:81:00.2"],
        )

    assert _all_device_rows() == before


def test_batch_save_writes_nothing_when_a_new_device_already_exists(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceExists):
        api.pci_device_batch_save(
            ctxt,
            node.id,
            create=[factories.new_device_values("0000:81:00.2")],
            update={"0000:81:00.1": {"status": "claimed"}},
        )

    assert _all_device_rows() == before


# ------------------------------------------------- batch save: compare-and-swap

A, B = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
FREE = {"status": "available", "instance_uuid": None}
CLAIMED_BY_A = {"status": "claimed", "instance_uuid": A}
CLAIMED_BY_B = {"status": "claimed", "instance_uuid": B}


def test_batch_save_claims_a_device_still_as_the_writer_expected(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1")

    api.pci_device_batch_save(
        ctxt, node.id, update={"0000:81:00.1": CLAIMED_BY_A}, expected={"0000:81:00.1": FREE}
    )

    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").instance_uuid == A


def test_batch_save_writes_nothing_when_another_writer_took_a_device_first(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    api.pci_device_batch_save(ctxt, node.id, update={"0000:81:00.2": CLAIMED_BY_B})
    before = _all_device_rows()

    with pytest.raises(exception.PciDeviceConflict) as raised:
        api.pci_device_batch_save(
            ctxt,
            node.id,
            update={"0000:81:00.1": CLAIMED_BY_A, "0000:81:00.2": CLAIMED_BY_A},
            expected={"0000:81:00.1": FREE, "0000:81:00.2": FREE},
        )

    assert raised.value.kwargs["addresses"] == ["0000:81:00.2"]
    assert f"expected available, found claimed by {B}" in str(raised.value)
    assert _all_device_rows() == before


def test_batch_save_retried_after_it_landed_is_not_a_conflict(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1")
    claim = {"update": {"0000:81:00.1": CLAIMED_BY_A}, "expected": {"0000:81:00.1": FREE}}
    api.pci_device_batch_save(ctxt, node.id, **claim)

    result = api.pci_device_batch_save(ctxt, node.id, **claim)

    assert list(result.updated) == ["0000:81:00.1"]


def test_batch_save_without_expectations_writes_as_before(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1")
    api.pci_device_batch_save(ctxt, node.id, update={"0000:81:00.1": CLAIMED_BY_B})

    api.pci_device_batch_save(ctxt, node.id, update={"0000:81:00.1": CLAIMED_BY_A})

    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").instance_uuid == A


def test_batch_save_refuses_to_destroy_a_device_another_writer_claimed(db, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1")
    api.pci_device_batch_save(ctxt, node.id, update={"0000:81:00.1": CLAIMED_BY_B})

    with pytest.raises(exception.PciDeviceConflict):
        api.pci_device_batch_save(
            ctxt, node.id, destroy=["0000:81:00.1"], expected={"0000:81:00.1": FREE}
        )

    assert api.pci_device_get_by_addr(ctxt, node.id, "0000:81:00.1").status == "claimed"


def test_get_all_lists_live_devices_of_every_node(db, ctxt):
    node1 = factories.compute_node(ctxt, node="node1")
    node2 = factories.compute_node(ctxt, node="node2")
    factories.pci_device(ctxt, node1.id, "0000:81:00.1")
    factories.pci_device(ctxt, node2.id, "0000:81:00.1")
    factories.pci_device(ctxt, node2.id, "0000:81:00.2")
    api.pci_device_destroy(ctxt, node2.id, "0000:81:00.2")

    devices = api.pci_device_get_all(ctxt)

    assert [(d.compute_node_id, d.address) for d in devices] == [
        (node1.id, "0000:81:00.1"),
        (node2.id, "0000:81:00.1"),
    ]


def test_get_all_filters_by_host_status_type_and_holder(db, ctxt):
    here = factories.compute_node(ctxt, host="here", node="n")
    there = factories.compute_node(ctxt, host="there", node="n")
    factories.pci_device(ctxt, here.id, "0000:81:00.1", status="allocated", instance_uuid="i-1")
    factories.pci_device(ctxt, here.id, "0000:81:00.2")
    factories.pci_device(ctxt, there.id, "0000:81:00.3", dev_type="type-PCI")

    def addresses(**filters):
        return [d.address for d in api.pci_device_get_all(ctxt, **filters)]

    assert addresses(host="here") == ["0000:81:00.1", "0000:81:00.2"]
    assert addresses(status="allocated") == ["0000:81:00.1"]
    assert addresses(dev_type="type-PCI") == ["0000:81:00.3"]
    assert addresses(instance_uuid="i-1") == ["0000:81:00.1"]
    assert addresses(host="there", status="allocated") == []


def test_get_all_refuses_an_unknown_filter(db, ctxt):
    with pytest.raises(exception.InvalidInput, match="colour"):
        api.pci_device_get_all(ctxt, colour="red")
