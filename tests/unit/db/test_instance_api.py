"""Instances, what they own (extra, faults) and compute nodes."""

import datetime
import uuid

import pytest
import sqlalchemy as sa

from pcisim import exception
from pcisim.db import api, engine, models
from tests.unit.db import factories

# ------------------------------------------------------------------- instances


def test_instance_create_stores_the_instance_and_its_extra(db, ctxt):
    inst = factories.instance(ctxt, display_name="vm1")

    stored = api.instance_get_by_uuid(ctxt, inst.uuid)
    extra = api.instance_extra_get_by_instance_uuid(ctxt, inst.uuid)
    assert (stored.id, stored.display_name, stored.deleted) == (inst.id, "vm1", 0)
    assert (extra.flavor, extra.pci_requests) == ('{"vcpus": 1}', "[]")


def test_instance_create_refuses_a_duplicate_uuid(db, ctxt):
    inst = factories.instance(ctxt, display_name="first")

    with pytest.raises(exception.InstanceExists) as raised:
        factories.instance(ctxt, uuid=inst.uuid, display_name="second")

    assert raised.value.kwargs == {"instance_uuid": inst.uuid}
    assert api.instance_get_by_uuid(ctxt, inst.uuid).display_name == "first"


def test_instance_get_by_uuid_of_an_unknown_instance_raises(db, ctxt):
    with pytest.raises(exception.InstanceNotFound):
        api.instance_get_by_uuid(ctxt, str(uuid.uuid4()))


def test_instance_get_by_uuid_hides_a_deleted_instance_unless_asked(db, ctxt):
    inst = factories.instance(ctxt)
    api.instance_destroy(ctxt, inst.uuid)

    with pytest.raises(exception.InstanceNotFound):
        api.instance_get_by_uuid(ctxt, inst.uuid)
    assert api.instance_get_by_uuid(ctxt, inst.uuid, read_deleted=True).id == inst.id


def test_instance_update_changes_the_stored_instance(db, ctxt):
    inst = factories.instance(ctxt)

    api.instance_update(ctxt, inst.uuid, {"vm_state": "stopped", "task_state": None})

    stored = api.instance_get_by_uuid(ctxt, inst.uuid)
    assert (stored.vm_state, stored.task_state) == ("stopped", None)
    assert stored.updated_at is not None


def test_instance_update_answers_the_time_it_wrote(db, ctxt):
    inst = factories.instance(ctxt)

    written = api.instance_update(ctxt, inst.uuid, {"vm_state": "stopped"})

    # NOTE: MariaDB's DATETIME keeps whole seconds.
    stored = api.instance_get_by_uuid(ctxt, inst.uuid).updated_at
    assert abs(stored - written) < datetime.timedelta(seconds=1)


def test_instance_update_of_a_deleted_instance_raises_not_found(db, ctxt):
    inst = factories.instance(ctxt)
    api.instance_destroy(ctxt, inst.uuid)

    with pytest.raises(exception.InstanceNotFound):
        api.instance_update(ctxt, inst.uuid, {"vm_state": "stopped"})
    assert api.instance_get_by_uuid(ctxt, inst.uuid, read_deleted=True).vm_state != "stopped"


def test_instance_update_refuses_to_change_the_uuid(db, ctxt):
    inst = factories.instance(ctxt)

    with pytest.raises(exception.InvalidInput, match="uuid"):
        api.instance_update(ctxt, inst.uuid, {"uuid": str(uuid.uuid4())})


def test_instance_destroy_soft_deletes_and_keeps_what_it_owns(db, ctxt):
    inst = factories.instance(ctxt)

    api.instance_destroy(ctxt, inst.uuid)

    stored = api.instance_get_by_uuid(ctxt, inst.uuid, read_deleted=True)
    assert stored.deleted == inst.id
    assert stored.deleted_at is not None
    assert api.instance_extra_get_by_instance_uuid(ctxt, inst.uuid).deleted == 0


def test_instance_get_all_by_host_and_node_returns_live_instances_there(db, ctxt):
    here = factories.instance(ctxt, host="host1", node="node1")
    factories.instance(ctxt, host="host1", node="node2")
    factories.instance(ctxt, host="host2", node="node1")
    api.instance_destroy(ctxt, factories.instance(ctxt, host="host1", node="node1").uuid)

    instances = api.instance_get_all_by_host_and_node(ctxt, "host1", "node1")

    assert [i.uuid for i in instances] == [here.uuid]


def test_instance_get_all_by_host_without_a_node_returns_all_its_nodes(db, ctxt):
    first = factories.instance(ctxt, host="host1", node="node1")
    second = factories.instance(ctxt, host="host1", node="node2")
    factories.instance(ctxt, host="host2", node="node1")

    instances = api.instance_get_all_by_host_and_node(ctxt, "host1")

    assert [i.uuid for i in instances] == [first.uuid, second.uuid]


# ---------------------------------------------------------------------- faults


def test_instance_fault_create_records_the_fault(db, ctxt):
    inst = factories.instance(ctxt)

    api.instance_fault_create(ctxt, {"instance_uuid": inst.uuid, "code": 500, "message": "boom"})

    (fault,) = api.instance_fault_get_by_instance_uuids(ctxt, [inst.uuid])[inst.uuid]
    assert (fault.code, fault.message) == (500, "boom")


def test_instance_fault_create_on_an_unknown_instance_raises(db, ctxt):
    missing = str(uuid.uuid4())

    with pytest.raises(exception.InstanceNotFound) as raised:
        api.instance_fault_create(ctxt, {"instance_uuid": missing, "code": 500})

    assert raised.value.kwargs == {"instance_uuid": missing}


# ---------------------------------------------------------------- compute nodes


def test_compute_node_create_and_get(db, ctxt):
    node = factories.compute_node(ctxt, host="host1", node="node1")

    stored = api.compute_node_get(ctxt, node.id)
    assert (stored.uuid, stored.host, stored.hypervisor_hostname) == (node.uuid, "host1", "node1")
    assert stored.vcpus_used == 0


def test_compute_node_create_refuses_a_duplicate_host_and_node(db, ctxt):
    factories.compute_node(ctxt, host="host1", node="node1")

    with pytest.raises(exception.ComputeNodeExists):
        factories.compute_node(ctxt, host="host1", node="node1")

    assert len(api.compute_node_get_all(ctxt)) == 1


def test_compute_node_get_of_an_unknown_node_raises(db, ctxt):
    with pytest.raises(exception.ComputeNodeNotFound):
        api.compute_node_get(ctxt, 4242)


def test_compute_node_get_by_host_and_nodename(db, ctxt):
    factories.compute_node(ctxt, host="host1", node="node1")
    node = factories.compute_node(ctxt, host="host1", node="node2")

    assert api.compute_node_get_by_host_and_nodename(ctxt, "host1", "node2").id == node.id
    with pytest.raises(exception.ComputeHostNotFound):
        api.compute_node_get_by_host_and_nodename(ctxt, "host2", "node2")


def test_compute_node_get_all_by_host_returns_its_live_nodes(db, ctxt):
    first = factories.compute_node(ctxt, host="host1", node="node1")
    second = factories.compute_node(ctxt, host="host1", node="node2")
    factories.compute_node(ctxt, host="host2", node="node3")
    api.compute_node_delete(ctxt, factories.compute_node(ctxt, host="host1", node="node4").id)

    nodes = api.compute_node_get_all_by_host(ctxt, "host1")

    assert [n.id for n in nodes] == [first.id, second.id]


def test_compute_node_get_all_by_host_without_nodes_raises(db, ctxt):
    factories.compute_node(ctxt, host="host1")

    with pytest.raises(exception.ComputeHostNotFound):
        api.compute_node_get_all_by_host(ctxt, "host2")


def test_compute_node_update_changes_the_stored_node(db, ctxt):
    node = factories.compute_node(ctxt)

    api.compute_node_update(ctxt, node.id, {"vcpus_used": 4, "pci_stats": "[]"})

    stored = api.compute_node_get(ctxt, node.id)
    assert (stored.vcpus_used, stored.pci_stats) == (4, "[]")


def test_compute_node_delete_soft_deletes_the_node_and_its_devices(db, ctxt):
    node = factories.compute_node(ctxt)
    factories.pci_device(ctxt, node.id, "0000:81:00.1")

    api.compute_node_delete(ctxt, node.id)

    with pytest.raises(exception.ComputeNodeNotFound):
        api.compute_node_get(ctxt, node.id)
    with engine.get_engine().connect() as connection:
        table = models.PciDevice.__table__
        (device,) = connection.execute(sa.select(table.c.status, table.c.deleted)).all()
    assert device.status == "deleted"
    assert device.deleted != 0


def test_instance_get_all_lists_live_instances_oldest_first(db, ctxt):
    first = factories.instance(ctxt)
    gone = factories.instance(ctxt)
    last = factories.instance(ctxt)
    api.instance_destroy(ctxt, gone.uuid)
    assert [i.uuid for i in api.instance_get_all(ctxt)] == [first.uuid, last.uuid]
