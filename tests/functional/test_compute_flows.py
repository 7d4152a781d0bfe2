"""Boot and delete instances with PCI devices through the whole in-process control plane."""

import pytest

from pcisim import faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.objects.instance import Instance
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests.functional import flows

SPECS = DeviceSpecList.from_config(['{"vendor_id": "8086"}', '{"vendor_id": "10de"}'])
ALIASES = parse_aliases(
    [
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    ]
)


@pytest.fixture
def plane(db):
    drivers = {
        "nic-host": SimulatedDriver.from_config(["nic-node=pfs=2,vfs_per_pf=4,numa_nodes=2"]),
        "gpu-host": SimulatedDriver.from_config(["gpu-node=gpus=2,numa_nodes=2"]),
    }
    with testing.ControlPlane(drivers, SPECS, ALIASES) as running:
        yield running


def _boot(plane, request, **flavor):
    instance = plane.api.create(plane.context, "vm", pci_requests=request, **flavor)
    return instance.uuid, plane.wait_for(instance.uuid)


def _delete(plane, instance_uuid):
    """Delete and wait until the instance is gone and holds no device."""
    instance = Instance.get_by_uuid(plane.context, instance_uuid)
    plane.api.delete(plane.context, instance)
    plane.wait_for(instance_uuid, done=("deleted",))
    testing.wait_until(lambda: not flows.devices(instance_uuid=instance_uuid), what="devices freed")


def test_a_vf_is_allocated_to_the_instance_and_its_pf_becomes_unavailable(plane):
    instance_uuid, state = _boot(plane, "vf:1")
    assert state == "active"
    (vf,) = flows.devices(instance_uuid=instance_uuid)
    assert (vf["status"], vf["dev_type"]) == ("allocated", "type-VF")
    (pf,) = flows.devices(address=vf["parent_addr"])
    assert pf["status"] == "unavailable"


def test_deleting_the_instance_frees_its_vf_and_the_pf(plane):
    instance_uuid, _ = _boot(plane, "vf:1")
    (vf,) = flows.devices(instance_uuid=instance_uuid)
    _delete(plane, instance_uuid)
    freed = flows.devices(address=vf["address"])
    assert [(d["status"], d["instance_uuid"]) for d in freed] == [("available", None)]


def test_an_archive_between_soft_delete_and_free_loses_no_device_row(plane):
    instance_uuid, _ = _boot(plane, "vf:1")
    (vf,) = flows.devices(instance_uuid=instance_uuid)
    rows_before = len(flows.devices())
    archived = []
    with faults.inject(faults.AFTER_SOFT_DELETE, lambda **d: archived.append(plane.archive())):
        _delete(plane, instance_uuid)
        plane.run_periodic()
    assert archived and archived[0].instance_uuids == [instance_uuid]
    assert "pci_devices" not in archived[0].rows
    assert len(flows.devices()) == rows_before
    (freed,) = flows.devices(address=vf["address"])
    assert (freed["status"], freed["instance_uuid"]) == ("available", None)
