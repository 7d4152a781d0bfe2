"""Boots racing for the last free device: exactly one wins, and a device never has two
holders, even with two conductors scheduling at once and two computes writing one node;
and no build is rescheduled for losing a race: the allocation each winner gets when its
node is chosen decides, before any compute claims.

The computes of a host serialize their claims in memory, so one compute alone never
double-allocates; a second writer of the same node (a compute that was replaced but
still runs, a duplicated host name) is what only the database can stop. Every save of
the PCI tracker is therefore a compare-and-swap on the devices' holders
(``pci_device_batch_save(expected=...)``), and these tests run such a second writer.
"""

import contextlib
import threading

import pytest

from pcisim import conf, exception, testing
from pcisim.compute import service as compute_service
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import service as conductor_service
from pcisim.objects.instance import Instance
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends
from tests.functional import flows

SPECS = DeviceSpecList.from_config(['{"vendor_id": "8086"}', '{"vendor_id": "10de"}'])
ALIASES = parse_aliases(
    [
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    ]
)
GPU_HOSTS = {"gpu-a": "node-a=gpus=1", "gpu-b": "node-b=gpus=1"}
SRIOV_HOST = {"nic": "node-nic=pfs=1,vfs_per_pf=1"}
IN_PROCESS = conf.IN_PROCESS_TRANSPORT_URL


@pytest.fixture(scope="module", params=["sqlite", "mysql", "postgresql"])
def database(request, tmp_path_factory):
    """SQLite (writers serialized by BEGIN IMMEDIATE), MariaDB and PostgreSQL (row
    locks)."""
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


def _plane(hosts, transport_url):
    drivers = {host: SimulatedDriver.from_config([inventory]) for host, inventory in hosts.items()}
    return testing.ControlPlane(drivers, SPECS, ALIASES, transport_url)


@contextlib.contextmanager
def _second_writers(plane):
    """Another compute service for every host, on the same hypervisor, and another
    conductor on the same topic: each host's messages go to either of its two
    computes, each with a tracker of its own; builds are scheduled by either conductor."""
    services = [
        compute_service.ComputeService(host, driver, SPECS, plane.conductor.transport_url)
        for host, driver in plane.drivers.items()
    ]
    services.append(
        conductor_service.ConductorService(
            plane.conductor.transport_url, topic=plane.conductor.topic
        )
    )
    for service in services:
        service.start()
    try:
        yield services[:-1]
    finally:
        stoppers = [threading.Thread(target=service.stop) for service in services]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


def _assert_one_winner_per_device(outcomes, devices):
    states = sorted(state for state, _ in outcomes.values())
    assert states == ["active"] * devices + ["error"] * (len(outcomes) - devices)
    assert all("No valid host" in fault for state, fault in outcomes.values() if state == "error")
    held = flows.holders()
    assert sorted(held) == sorted(u for u, (state, _) in outcomes.items() if state == "active")
    devices_held = [device for owned in held.values() for device in owned]
    assert len(devices_held) == len(set(devices_held))


def test_boots_racing_for_the_last_gpus_give_each_to_one_instance(db, rabbit_url, reschedules):
    with _plane(GPU_HOSTS, rabbit_url) as plane, _second_writers(plane):
        _assert_one_winner_per_device(flows.boot_at_once(plane, ["gpu:1"] * 6), devices=2)
    assert reschedules == []


def test_boots_racing_for_a_pf_and_its_vf_give_the_pair_to_one_instance(
    db, rabbit_url, reschedules
):
    with _plane(SRIOV_HOST, rabbit_url) as plane, _second_writers(plane):
        _assert_one_winner_per_device(flows.boot_at_once(plane, ["pf:1", "vf:1"] * 3), devices=1)
    assert reschedules == []


def test_a_stale_compute_cannot_claim_a_device_the_other_one_gave_away(db):
    with (
        _plane({"gpu-a": GPU_HOSTS["gpu-a"]}, IN_PROCESS) as plane,
        _second_writers(plane) as (other,),
    ):
        first, _ = plane.boot("first", "gpu:1")
        second = plane.api.create(plane.context, "second", pci_requests="gpu:1")
        plane.wait_for(second.uuid)  # "No valid host": the pools say the GPU is taken
        trackers = [
            plane.computes["gpu-a"].manager.trackers["node-a"],
            other.manager.trackers["node-a"],
        ]
        (stale,) = [tracker for tracker in trackers if first not in tracker.pci_tracker.holders()]

        with pytest.raises(exception.ComputeResourcesUnavailable, match="another writer"):
            stale.instance_claim(plane.context, Instance.get_by_uuid(plane.context, second.uuid))

        assert stale.pci_tracker.holders() == {first}
        assert list(flows.holders()) == [first]
