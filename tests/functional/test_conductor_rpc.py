"""Remotable calls from a compute-side thread reach the conductor over a real transport."""

import datetime
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from pcisim import dbaccess, exception, testing
from pcisim.conductor import manager as conductor_manager
from pcisim.db import api as db_api
from pcisim.db import engine, models
from pcisim.objects import base as objects_base
from pcisim.objects import pci_device
from pcisim.objects.compute_node import ComputeNode, ComputeNodeList
from pcisim.objects.instance import Instance, InstanceList
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from pcisim.objects.pci_device_pool import PciDevicePool, PciDevicePoolList
from tests import config_overrides, object_factories


def _device_rows():
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        table = models.PciDevice.__table__
        return [dict(row._mapping) for row in connection.execute(sa.select(table))]


def test_compute_node_create_save_get_and_destroy_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    node.vcpus_used = 2
    node.pci_device_pools = PciDevicePoolList(
        objects=[
            PciDevicePool(
                vendor_id="8086",
                product_id="1520",
                numa_node=0,
                dev_type="type-VF",
                tags={"physical_network": "physnet1"},
                count=7,
            )
        ]
    )
    node.save()

    fetched = ComputeNode.get_by_host_and_nodename(ctxt, "host1", "node1")
    assert (fetched.id, fetched.vcpus_used) == (node.id, 2)
    assert fetched.pci_device_pools[0].count == 7
    assert ComputeNode.get_by_id(ctxt, node.id).uuid == node.uuid
    assert [n.id for n in ComputeNodeList.get_all_by_host(ctxt, "host1")] == [node.id]
    assert [n.id for n in ComputeNodeList.get_all(ctxt)] == [node.id]
    node.destroy()
    assert node.deleted
    with pytest.raises(exception.ComputeNodeNotFound):
        ComputeNode.get_by_id(ctxt, node.id)
    assert conductor.calls[("object_action", "ComputeNode", "create")] == 1


def test_instance_with_pci_requests_round_trip(conductor, ctxt):
    requests = InstancePCIRequests(
        requests=[
            InstancePCIRequest(
                count=1,
                spec=[{"vendor_id": "8086"}],
                alias_name="nic",
                request_id=str(uuid.uuid4()),
                numa_policy="legacy",
            )
        ]
    )
    instance = Instance(
        ctxt,
        uuid=str(uuid.uuid4()),
        host="host1",
        node="node1",
        vm_state="building",
        pci_requests=requests,
    )
    instance.create()
    instance.vm_state = "active"
    instance.save()

    fetched = Instance.get_by_uuid(ctxt, instance.uuid, expected_attrs=["pci_requests"])
    assert fetched.vm_state == "active"
    assert fetched.pci_requests.requests[0].alias_name == "nic"
    assert InstancePCIRequests.get_by_instance_uuid(ctxt, instance.uuid).requests[0].count == 1
    listed = InstanceList.get_by_host_and_node(ctxt, "host1", "node1")
    assert [i.uuid for i in listed] == [instance.uuid]
    instance.destroy()
    with pytest.raises(exception.InstanceNotFound):
        Instance.get_by_uuid(ctxt, instance.uuid)


def test_instance_loads_its_devices_lazily_through_the_conductor(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), host="host1", node="node1")
    instance.create()
    object_factories.vf(ctxt, node, status="allocated", instance_uuid=instance.uuid)

    fetched = Instance.get_by_uuid(ctxt, instance.uuid)

    assert [d.address for d in fetched.pci_devices] == ["0000:81:00.1"]
    assert (
        conductor.calls[("object_class_action_versions", "PciDeviceList", "get_by_instance_uuid")]
        == 1
    )


def test_pci_device_create_save_get_and_destroy_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node)
    assert device.id and not device.obj_what_changed()

    device.status, device.instance_uuid = "allocated", "i-1"
    device.save()

    assert not device.obj_what_changed()
    assert PciDevice.get_by_dev_addr(ctxt, node.id, device.address).status == "allocated"
    assert PciDevice.get_by_dev_id(ctxt, device.id).instance_uuid == "i-1"
    assert [d.id for d in PciDeviceList.get_by_instance_uuid(ctxt, "i-1")] == [device.id]
    device.destroy()
    assert (device.status, device.deleted) == ("deleted", True)
    assert list(PciDeviceList.get_by_compute_node(ctxt, node.id)) == []


def test_explicit_create_of_a_pci_device_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = PciDevice(
        ctxt,
        compute_node_id=node.id,
        address="0000:05:00.0",
        vendor_id="10de",
        product_id="1eb8",
        dev_type="type-PCI",
        status="available",
        label="gpu",
    )
    device.create()
    assert PciDevice.get_by_dev_id(ctxt, device.id).label == "gpu"
    with pytest.raises(exception.ObjectActionError):
        device.create()


def test_saving_a_removed_device_soft_deletes_it(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node)
    device.status = "removed"

    device.save()

    assert device.status == "deleted"
    assert [row["deleted"] for row in _device_rows()] == [device.id]


def test_creating_a_device_without_identity_fields_arrives_as_invalid_input(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = PciDevice(ctxt, compute_node_id=node.id, address="0000:81:00.1", status="available")
    with pytest.raises(exception.InvalidInput, match="vendor_id, product_id, dev_type, label"):
        device.save()
    assert _device_rows() == []


def test_saving_an_archived_device_raises_not_found_keeps_changes_inserts_nothing(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node, status="allocated", instance_uuid="i-1")
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(sa.delete(models.PciDevice.__table__))
    device.status, device.instance_uuid = "available", None

    with pytest.raises(exception.PciDeviceNotFound) as raised:
        device.save()

    assert raised.value.kwargs == {"node_id": node.id, "address": "0000:81:00.1"}
    assert device.obj_what_changed() == {"status", "instance_uuid"}
    assert _device_rows() == []


def test_batch_save_writes_every_change_in_one_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    devices = PciDeviceList(
        ctxt, objects=[object_factories.vf(ctxt, node, f"0000:81:00.{f}") for f in range(1, 6)]
    )
    for device in devices[:4]:
        device.status = "claimed"
    devices[4].status = "removed"
    devices.objects.append(
        PciDevice(
            ctxt,
            compute_node_id=node.id,
            address="0000:82:00.0",
            vendor_id="8086",
            product_id="1521",
            dev_type="type-PF",
            status="available",
            label="pf",
        )
    )
    before = conductor.calls.total()

    devices.save()

    assert conductor.calls.total() - before == 1
    assert not any(d.obj_what_changed() for d in devices)
    stored = {d.address: d.status for d in PciDeviceList.get_by_compute_node(ctxt, node.id)}
    assert stored == {
        **{f"0000:81:00.{f}": "claimed" for f in range(1, 5)},
        "0000:82:00.0": "available",
    }
    assert devices[5].id is not None and devices[4].status == "deleted"


def test_batch_save_with_nothing_changed_makes_no_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    devices = PciDeviceList.get_by_compute_node(ctxt, node.id)
    before = conductor.calls.total()
    devices.save()
    assert conductor.calls.total() == before


def test_batch_save_reports_archived_devices_and_saves_the_others(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    kept, archived = (
        object_factories.vf(ctxt, node, "0000:81:00.1"),
        object_factories.vf(ctxt, node, "0000:81:00.2"),
    )
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        table = models.PciDevice.__table__
        connection.execute(sa.delete(table).where(table.c.address == "0000:81:00.2"))
    kept.status = archived.status = "claimed"

    with pytest.raises(exception.PciDevicesNotFound) as raised:
        PciDeviceList(ctxt, objects=[kept, archived]).save()

    assert raised.value.kwargs["addresses"] == ["0000:81:00.2"]
    assert not kept.obj_what_changed()
    assert archived.obj_what_changed() == {"status"}
    assert [row["address"] for row in _device_rows()] == ["0000:81:00.1"]


def test_batch_save_sends_only_changes_and_takes_ids_and_times_back(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    claimed = object_factories.vf(ctxt, node, "0000:81:00.1")
    claimed.status, claimed.instance_uuid = "claimed", str(uuid.uuid4())
    new = object_factories.new_pf(ctxt, node, "0000:82:00.0")

    PciDeviceList(ctxt, objects=[claimed, new]).save()

    rows = {row["address"]: row for row in _device_rows()}
    assert (new.id, claimed.status) == (rows[new.address]["id"], "claimed")
    # MariaDB keeps whole seconds of what was written
    second, naive_utc = datetime.timedelta(seconds=1), objects_base.naive_utc
    assert abs(naive_utc(claimed.updated_at) - rows[claimed.address]["updated_at"]) < second
    assert abs(naive_utc(new.created_at) - rows[new.address]["created_at"]) < second
    assert not claimed.obj_what_changed() and not new.obj_what_changed()


def test_a_device_list_given_to_save_with_devices_is_answered_with_the_devices_as_stored(
    conductor, ctxt
):
    """As a compute of ComputeNode 1.4 or older calls it."""
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node)
    device.status, node.vcpus_used = "unavailable", 2

    stored = node.save_with_devices(PciDeviceList(ctxt, objects=[device]))

    assert [(d.id, d.status, d.obj_what_changed()) for d in stored] == [
        (device.id, "unavailable", set())
    ]
    assert stored[0].updated_at is not None
    assert ComputeNode.get_by_id(ctxt, node.id).vcpus_used == 2
    assert [row["status"] for row in _device_rows()] == ["unavailable"]


def _building_instance(ctxt):
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), host="host1", node="node1")
    instance.vm_state = "building"
    instance.create()
    return instance


def test_an_instance_saved_with_its_devices_writes_both_in_one_round_trip(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    instance = _building_instance(ctxt)
    device = object_factories.vf(ctxt, node, status="claimed", instance_uuid=instance.uuid)
    device.status, instance.vm_state = "allocated", "active"
    before = conductor.calls.total()

    PciDeviceList(ctxt, objects=[device]).save(instance=instance)

    assert conductor.calls.total() - before == 1
    assert conductor.calls[("object_action", "Instance", "save_with_devices")] == 1
    assert Instance.get_by_uuid(ctxt, instance.uuid).vm_state == "active"
    assert [row["status"] for row in _device_rows()] == ["allocated"]
    assert not device.obj_what_changed() and not instance.obj_what_changed()


def test_an_instance_saved_with_devices_another_writer_changed_writes_neither(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    instance = _building_instance(ctxt)
    device = object_factories.vf(ctxt, node, status="claimed", instance_uuid=instance.uuid)
    device.status, instance.vm_state = "allocated", "active"
    read_before = {device.address: {"status": "available", "instance_uuid": None}}

    with pytest.raises(exception.PciDeviceConflict):
        PciDeviceList(ctxt, objects=[device]).save(read_before, instance=instance)

    assert Instance.get_by_uuid(ctxt, instance.uuid).vm_state == "building"
    assert [row["status"] for row in _device_rows()] == ["claimed"]


def _node_with_a_claimed_vf(ctxt):
    """A node, a building instance and its claimed VF, both changed as a build's
    allocation changes them, and the node's usage as its claim does."""
    node = object_factories.compute_node(ctxt)
    instance = _building_instance(ctxt)
    device = object_factories.vf(ctxt, node, status="claimed", instance_uuid=instance.uuid)
    device.status, instance.vm_state, node.vcpus_used = "allocated", "active", 2
    return node, instance, device


def test_a_node_saved_with_an_instance_and_its_devices_is_written_in_the_same_call(conductor, ctxt):
    node, instance, device = _node_with_a_claimed_vf(ctxt)
    before = conductor.calls.total()

    PciDeviceList(ctxt, objects=[device]).save(node=node, instance=instance)

    assert conductor.calls.total() - before == 1
    stored = ComputeNode.get_by_id(ctxt, node.id)
    assert stored.vcpus_used == 2
    assert node.updated_at.replace(microsecond=0) == stored.updated_at  # as a save sets it
    assert not node.obj_what_changed() and not instance.obj_what_changed()
    assert [row["status"] for row in _device_rows()] == ["allocated"]


def test_a_node_saved_with_devices_another_writer_changed_is_not_written(conductor, ctxt):
    node, instance, device = _node_with_a_claimed_vf(ctxt)
    read_before = {device.address: {"status": "available", "instance_uuid": None}}

    with pytest.raises(exception.PciDeviceConflict):
        PciDeviceList(ctxt, objects=[device]).save(read_before, node=node, instance=instance)

    assert ComputeNode.get_by_id(ctxt, node.id).vcpus_used == 0
    assert node.obj_what_changed() == {"vcpus_used"}


def test_an_instance_saved_with_the_devices_of_one_node_and_another_node_is_refused(
    conductor, ctxt
):
    node, instance, _ = _node_with_a_claimed_vf(ctxt)
    other = object_factories.compute_node(ctxt, node="other-node")
    other.vcpus_used = 4

    refused = f"node {node.id}, the node sent is {other.id}"
    with pytest.raises(exception.InvalidInput, match=refused):
        instance.save_with_devices(node.id, pci_device.NO_CHANGES, node=other)

    assert ComputeNode.get_by_id(ctxt, other.id).vcpus_used == 0
    assert Instance.get_by_uuid(ctxt, instance.uuid).vm_state == "building"


def test_an_instance_saved_with_devices_and_what_is_not_a_node_is_refused(conductor, ctxt):
    node, instance, _ = _node_with_a_claimed_vf(ctxt)

    with pytest.raises(exception.InvalidInput, match="node must be a ComputeNode, not a dict"):
        instance.save_with_devices(node.id, pci_device.NO_CHANGES, node={"id": node.id})

    assert Instance.get_by_uuid(ctxt, instance.uuid).vm_state == "building"


def test_devices_saved_with_an_instance_that_is_gone_are_not_written(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    instance = _building_instance(ctxt)
    device = object_factories.vf(ctxt, node, status="claimed", instance_uuid=instance.uuid)
    Instance.get_by_uuid(ctxt, instance.uuid).destroy()
    device.status, instance.vm_state = "allocated", "active"

    with pytest.raises(exception.InstanceNotFound):
        PciDeviceList(ctxt, objects=[device]).save(instance=instance)

    assert [row["status"] for row in _device_rows()] == ["claimed"]
    assert device.obj_what_changed() == {"status"}


def test_direct_database_call_from_the_compute_side_is_refused(conductor, ctxt):
    with pytest.raises(exception.DBNotAllowed, match="pcisim.db.api.pci_device_get_all_by_node"):
        db_api.pci_device_get_all_by_node(ctxt, 1)


def test_every_compute_side_write_is_an_object_action_message(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node)
    for status in ("claimed", "allocated", "available"):
        device.status = status
        device.save()

    assert conductor.calls[("object_action", "PciDevice", "save")] == 4
    assert conductor.calls[("object_action", "ComputeNode", "create")] == 1


def test_results_come_back_in_the_versions_the_caller_knows(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    object_factories.vf(ctxt, node, uuid=str(uuid.uuid4()))
    api = objects_base.PcisimObject.indirection_api

    device = api.object_class_action_versions(
        ctxt, "PciDevice", "get_by_dev_addr", {"PciDevice": "1.0"}, (node.id, "0000:81:00.1"), {}
    )

    assert device.VERSION == "1.0"
    assert device.address == "0000:81:00.1"
    assert not device.obj_attr_is_set("uuid")


def test_conductor_unavailable_times_out_and_keeps_pending_changes(db, transport_url, ctxt, config):
    with testing.InProcessConductor(transport_url) as conductor:
        device = object_factories.vf(ctxt, object_factories.compute_node(ctxt))
        conductor.service.stop()
        device.status = "claimed"
        with config_overrides.overridden(config, {("rpc_response_timeout", None): 1}):
            with pytest.raises(messaging.MessagingTimeout):
                device.save()
    assert device.obj_what_changed() == {"status"}


def test_the_pre_manifest_calls_reach_the_same_conductor_methods(conductor, ctxt):
    node = object_factories.compute_node(ctxt)
    stored = object_factories.vf(ctxt, node, uuid=str(uuid.uuid4()))
    api = objects_base.PcisimObject.indirection_api

    device = api.object_class_action(
        ctxt, "PciDevice", "get_by_dev_addr", "1.0", (node.id, stored.address), {}
    )
    backported = api.object_backport(ctxt, stored, "1.0")

    assert (device.VERSION, device.obj_attr_is_set("uuid")) == ("1.0", False)
    assert (backported.VERSION, backported.obj_attr_is_set("uuid")) == ("1.0", False)


@pytest.fixture
def arrivals(monkeypatch):
    """(method, fields set, fields pending, fields answered) of each object that reaches
    the conductor's ``object_action``, which runs as ever."""
    arrived, object_action = [], conductor_manager.ConductorManager.object_action

    def recording(self, context, objinst, objmethod, args, kwargs):
        is_set = sorted(name for name in objinst.fields if objinst.obj_attr_is_set(name))
        pending = sorted(objinst.obj_what_changed())
        updates, result = object_action(self, context, objinst, objmethod, args, kwargs)
        answered = sorted(set(updates) - {"obj_what_changed"})
        arrived.append((objmethod, is_set, pending, answered))
        return updates, result

    monkeypatch.setattr(conductor_manager.ConductorManager, "object_action", recording)
    return arrived


def test_a_node_save_sends_its_id_and_changes_without_its_pools(conductor, ctxt, arrivals):
    node = object_factories.compute_node(ctxt)
    pools = PciDevicePoolList(
        objects=[PciDevicePool(vendor_id="8086", product_id="1520", dev_type="type-VF", count=8)]
    )
    node.pci_device_pools = node.pci_inventory = pools
    node.save()
    arrivals.clear()
    node.vcpus_used = 3

    node.save()

    assert arrivals == [("save", ["id", "vcpus_used"], ["vcpus_used"], ["updated_at"])]
    assert not node.obj_what_changed()
    assert node.pci_device_pools[0].count == 8
    stored = ComputeNode.get_by_id(ctxt, node.id)
    assert (stored.vcpus_used, stored.pci_device_pools[0].count) == (3, 8)
    assert node.updated_at == stored.updated_at


def test_an_instance_save_sends_its_uuid_and_changes_without_its_requests(
    conductor, ctxt, arrivals
):
    requests = InstancePCIRequests(
        requests=[InstancePCIRequest(count=1, spec=[{"vendor_id": "8086"}], alias_name="nic")]
    )
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vm_state="building", pci_requests=requests)
    instance.create()
    arrivals.clear()
    instance.task_state = "spawning"

    instance.save()

    assert arrivals == [("save", ["task_state", "uuid"], ["task_state"], ["updated_at"])]
    assert not instance.obj_what_changed()
    assert instance.pci_requests.requests[0].alias_name == "nic"
    assert Instance.get_by_uuid(ctxt, instance.uuid).task_state == "spawning"


def test_a_create_sends_the_whole_object(conductor, ctxt, arrivals):
    node = object_factories.compute_node(ctxt)

    [(method, is_set, _, _)] = arrivals
    assert method == "create"
    assert {"uuid", "host", "hypervisor_hostname", "vcpus"} <= set(is_set)
    assert node.id is not None


def test_an_instance_destroy_sends_its_uuid_and_changes_and_takes_the_times_back(
    conductor, ctxt, arrivals
):
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vm_state="active", display_name="vm")
    instance.create()
    arrivals.clear()
    instance.vm_state = "deleted"

    instance.destroy()

    deletion = ["deleted", "deleted_at", "updated_at"]
    assert arrivals == [("destroy", ["uuid", "vm_state"], ["vm_state"], deletion)]
    assert instance.deleted and instance.deleted_at is not None
    assert (instance.display_name, instance.vm_state) == ("vm", "deleted")
    assert not instance.obj_what_changed()
    with pytest.raises(exception.InstanceNotFound):
        Instance.get_by_uuid(ctxt, instance.uuid)
