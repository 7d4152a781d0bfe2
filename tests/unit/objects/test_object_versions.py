"""Object versions: a change to fields or remotable methods must come with a bump."""

import uuid

import pytest
from oslo_versionedobjects import fixture

from pcisim import objects
from pcisim.objects import base
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance import Instance
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from pcisim.objects.pci_device_pool import PciDevicePool, PciDevicePoolList
from pcisim.objects.service import SERVICE_VERSION, Service, ServiceList

objects.register_all()

# When a test below fails, bump the object's VERSION, note the change in its version
# log, handle the old version in obj_make_compatible, and update the hash here.
EXPECTED_FINGERPRINTS = {
    "ComputeNode": "1.5-91e4c5c17fab9741afc2140fb830e2cc",
    "ComputeNodeList": "1.5-2869e5881bb3692cefc9723beaeb30f7",
    "Flavor": "1.0-ce643c5f7bf038de2a210f4f5c099837",
    "FlavorList": "1.0-1275b55e9dd34d1cc92f1a8698c7319a",
    "Instance": "1.6-63a5d0080612b083f07fdb63be804a40",
    "InstanceFault": "1.0-fc58e91322d1961c3ef8e6ead42430f1",
    "InstanceFaultList": "1.0-f8ec07cbe3b60f5f07a8b7a06311ac0d",
    "InstanceList": "1.6-3ec473f1ad8bb7c8d43f8e5b0c1f2498",
    "InstancePCIRequest": "1.1-98e064b6abafcb39990b9db9e8933b40",
    "InstancePCIRequests": "1.1-198e10e769b4369ee21d4e52e92be283",
    "PciDevice": "1.1-6734b954f8f636ef7fb3256b07846378",
    "PciDeviceList": "1.4-bda57595f88a13624127a205bfc41bf3",
    "PciDevicePool": "1.1-4fa186d420b23db52de78367db5f81c3",
    "PciDevicePoolList": "1.2-9371f5dcaa94e8dfef3fc83549aca710",
    "Service": "1.1-9a81e9f240c7539288cfa5ea9c358780",
    "ServiceList": "1.1-fbe86160e8f7fabad7c6bb2c27913a4e",
}

EXPECTED_DEPENDENCIES = {
    "ComputeNode": {"PciDevicePoolList": "1.2"},
    "Instance": {"Flavor": "1.0", "InstancePCIRequests": "1.1", "PciDeviceList": "1.4"},
}


@pytest.fixture
def checker():
    return fixture.ObjectVersionChecker(base.PcisimObjectRegistry.obj_classes())


def test_fields_and_remotable_methods_match_their_versions(checker):
    expected, actual = checker.test_hashes(EXPECTED_FINGERPRINTS)
    assert actual == expected, "an object changed without a version bump"


def test_nested_object_versions_are_declared(checker):
    expected, actual = checker.test_relationships(EXPECTED_DEPENDENCIES)
    assert actual == expected


def test_every_version_backports_through_obj_make_compatible(checker):
    checker.test_compatibility_routines(use_manifest=True)


def test_relationships_are_in_version_order(checker):
    checker.test_relationships_in_order()


def test_the_fingerprint_changes_when_a_field_is_added():
    class Changed(PciDevice):
        fields = {**PciDevice.fields, "colour": PciDevice.fields["label"]}

    before = fixture.ObjectVersionChecker({"PciDevice": [PciDevice]}).get_hashes()
    after = fixture.ObjectVersionChecker({"PciDevice": [Changed]}).get_hashes()
    assert before != after


def _device(**values):
    return PciDevice(
        id=1,
        compute_node_id=1,
        address="0000:81:00.1",
        vendor_id="8086",
        product_id="1520",
        dev_type="type-VF",
        status="available",
        label="l",
        uuid=str(uuid.uuid4()),
        **values,
    )


def test_pci_device_1_0_has_no_uuid():
    primitive = _device().obj_to_primitive(target_version="1.0")
    assert "uuid" not in primitive["pcisim_object.data"]
    assert primitive["pcisim_object.version"] == "1.0"


def test_pci_device_list_1_0_carries_pci_devices_1_0():
    devices = PciDeviceList(objects=[_device()])
    primitive = devices.obj_to_primitive(target_version="1.0")
    (child,) = primitive["pcisim_object.data"]["objects"]
    assert child["pcisim_object.version"] == "1.0"
    assert "uuid" not in child["pcisim_object.data"]


def test_instance_pci_request_1_0_has_no_numa_policy():
    request = InstancePCIRequest(count=1, spec=[{}], numa_policy="required")
    assert "numa_policy" not in request.obj_to_primitive("1.0")["pcisim_object.data"]


def test_instance_pci_requests_1_0_carries_requests_1_0():
    requests = InstancePCIRequests(
        instance_uuid=str(uuid.uuid4()),
        requests=[InstancePCIRequest(count=1, spec=[{}], numa_policy="required")],
    )
    data = requests.obj_to_primitive("1.0")["pcisim_object.data"]
    (child,) = data["requests"]
    assert child["pcisim_object.version"] == "1.0"
    assert "numa_policy" not in child["pcisim_object.data"]


def _inventory_pool():
    return PciDevicePool(
        vendor_id="8086",
        product_id="1520",
        numa_node=0,
        dev_type="type-VF",
        tags={},
        count=8,
        group="0000:81:00.0",
    )


def test_compute_node_1_0_drops_its_nested_pools():
    pools = PciDevicePoolList(objects=[_inventory_pool()])
    node = ComputeNode(id=1, host="h", hypervisor_hostname="n", pci_device_pools=pools)
    data = node.obj_to_primitive("1.0")["pcisim_object.data"]
    assert "pci_device_pools" not in data
    assert data["host"] == "h"


def test_instance_1_0_carries_a_device_list_1_1():
    instance = Instance(uuid=str(uuid.uuid4()), pci_devices=PciDeviceList(objects=[_device()]))
    data = instance.obj_to_primitive("1.0")["pcisim_object.data"]
    devices = data["pci_devices"]
    assert devices["pcisim_object.version"] == "1.1"
    (device,) = devices["pcisim_object.data"]["objects"]
    assert device["pcisim_object.version"] == "1.1"


def test_compute_node_1_1_drops_its_inventory_and_carries_pools_1_0():
    pools = PciDevicePoolList(objects=[_inventory_pool()])
    node = ComputeNode(
        id=1, host="h", hypervisor_hostname="n", pci_device_pools=pools, pci_inventory=pools
    )
    data = node.obj_to_primitive("1.1")["pcisim_object.data"]
    assert "pci_inventory" not in data
    (pool,) = data["pci_device_pools"]["pcisim_object.data"]["objects"]
    assert pool["pcisim_object.version"] == "1.0"
    assert "group" not in pool["pcisim_object.data"]


def test_pci_device_pool_list_1_1_has_no_numa_sockets():
    pools = PciDevicePoolList.of([_inventory_pool()], numa_sockets={0: 0, 1: 0})
    data = pools.obj_to_primitive("1.1")["pcisim_object.data"]
    assert "numa_sockets" not in data
    assert len(data["objects"]) == 1


def test_compute_node_1_3_carries_pools_without_numa_sockets():
    pools = PciDevicePoolList.of([_inventory_pool()], numa_sockets={0: 0})
    node = ComputeNode(id=1, host="h", hypervisor_hostname="n", pci_inventory=pools)
    inventory = node.obj_to_primitive("1.3")["pcisim_object.data"]["pci_inventory"]
    assert inventory["pcisim_object.version"] == "1.1"
    assert "numa_sockets" not in inventory["pcisim_object.data"]


def test_a_pool_list_keeps_its_numa_sockets_through_json():
    pools = PciDevicePoolList.of([_inventory_pool()], numa_sockets={0: 0, 1: 0})
    loaded = PciDevicePoolList.from_json(pools.to_json())
    assert loaded.socket_map() == {0: 0, 1: 0}
    assert [p.to_dict() for p in loaded] == [_inventory_pool().to_dict()]


def test_a_pool_list_stored_before_numa_sockets_reads_with_an_unknown_layout():
    stored = '[{"vendor_id": "8086", "product_id": "1520", "numa_node": 0,'
    stored += ' "dev_type": "type-VF", "tags": {}, "count": 8}]'
    loaded = PciDevicePoolList.from_json(stored)
    assert (loaded.numa_sockets, loaded.socket_map(), loaded[0].count) == (None, {}, 8)


def test_pci_device_pool_1_0_has_no_group():
    assert "group" not in _inventory_pool().obj_to_primitive("1.0")["pcisim_object.data"]


def test_service_1_0_has_no_version():
    service = Service(host="h", binary="pcisim-compute", version=SERVICE_VERSION)
    primitive = service.obj_to_primitive(target_version="1.0")
    assert "version" not in primitive["pcisim_object.data"]


def test_service_list_1_0_carries_services_1_0():
    services = ServiceList(objects=[Service(host="h", binary="pcisim-compute", version=1)])
    (child,) = services.obj_to_primitive(target_version="1.0")["pcisim_object.data"]["objects"]
    assert child["pcisim_object.version"] == "1.0"
    assert "version" not in child["pcisim_object.data"]


def test_instance_1_3_has_no_flavor_nor_image():
    flavor = Flavor(flavorid="1", name="m1", memory_mb=512, vcpus=1, root_gb=1, extra_specs={})
    instance = Instance(uuid=str(uuid.uuid4()), image_ref="cirros", flavor=flavor)

    data = instance.obj_to_primitive(target_version="1.3")["pcisim_object.data"]

    assert "flavor" not in data and "image_ref" not in data


def test_an_instance_keeps_its_flavor_copy_through_json():
    flavor = Flavor(
        flavorid="gpu",
        name="g1",
        memory_mb=2048,
        vcpus=2,
        root_gb=10,
        extra_specs={"pci_passthrough:alias": "gpu:1"},
    )

    copy = Flavor.from_json(flavor.to_json())

    assert (copy.flavorid, copy.extra_specs) == ("gpu", {"pci_passthrough:alias": "gpu:1"})
