"""Boots racing for nodes, with allocations, through the whole in-process control plane.

Concurrent boots never allocate more of a node than it has (checked each time the
conductor is about to write an allocation, so after every one written before it), and
what each running instance is allocated is exactly what it holds; when PF and VF
servers race, no instance gets a VF of a PF another instance holds. No build is
rescheduled: a lost compare-and-swap is chosen again in the conductor. More boots at
once than a service has handler threads wait their turn and all complete.

On every backend: each serializes the swap's row update its own way.
"""

import collections
import contextlib

import pytest

from pcisim import context as pcisim_context
from pcisim import dbaccess, faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import service as conductor_service
from pcisim.db import allocations as db_allocations
from pcisim.objects.instance import Instance
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from tests import backends, config_overrides
from tests.functional import flows

FLAVOR = {"vcpus": 2, "memory_mb": 512, "root_gb": 1}
# Room for two instances of FLAVOR a node, which may both want devices.
MIXED = {f"host-{i}": f"node-{i}=vcpus=4,gpus=1,pfs=2,vfs_per_pf=1" for i in range(3)}
NICS = {f"nic-{i}": f"nic-node-{i}=pfs=2,vfs_per_pf=2" for i in range(2)}


@pytest.fixture(scope="module", params=backends.BACKENDS)
def database(request, tmp_path_factory):
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


def _held_resources(instance_uuid):
    """{PCI resource name: devices} of what the instance holds, from its device rows
    (no device_spec here sets tags)."""
    return collections.Counter(map(flows.resource_of, flows.devices(instance_uuid=instance_uuid)))


def _overcommits(context):
    """(host, resource or counter) wherever a node's allocations sum to more than its
    inventory, name a PCI pool it does not have, or draw a PF/VF counter below zero;
    from one read of the nodes and their usage, as the scheduler reads them."""
    rows, usage = db_allocations.host_states(context)
    found = []
    for row in rows:
        used = usage.get(row.id, {})
        found += [
            (row.host, name)
            for name, column in capacity.NODE_TOTALS.items()
            if used.get(name, 0) > getattr(row, column)
        ]
        inventory = PciDevicePoolList.from_json(row.pci_inventory).objects
        by_name, sizes = capacity.draws(inventory)
        found += [
            (row.host, name)
            for name in used
            if name.startswith(capacity.PCI_PREFIX) and name not in by_name
        ]
        left = capacity.counters_left(by_name, sizes, used)
        found += [(row.host, counter) for counter, amount in left.items() if amount < 0]
    return found


@contextlib.contextmanager
def _watching_overcommits():
    """Check for overcommits each time the conductor is about to write an allocation
    (so after every one written before), inside the block; yields what was found."""
    found = []

    def check(**details):
        found.extend(_overcommits(pcisim_context.get_admin_context()))

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, check):
        yield found


def _assert_allocations_are_what_active_instances_hold(plane, outcomes, flavor):
    """Each active instance is allocated its flavor and exactly the devices it holds,
    on its own node; no one else is allocated anything."""
    node_ids = {(node.host, node.hypervisor_hostname): node.id for node in flows.nodes(plane)}
    active = sorted(uuid for uuid, (state, _) in outcomes.items() if state == "active")
    expected = {}
    for instance_uuid in active:
        instance = Instance.get_by_uuid(plane.context, instance_uuid)
        resources = {
            name: flavor[field] for name, field in capacity.FLAVOR_RESOURCES.items()
        } | dict(_held_resources(instance_uuid))
        expected[instance_uuid] = {node_ids[(instance.host, instance.node)]: resources}
    actual = collections.defaultdict(dict)
    for node_id, consumers in flows.allocations_by_node().items():
        for consumer, resources in consumers.items():
            actual[consumer][node_id] = dict(resources)
    assert dict(actual) == expected


def _assert_builds_ended_as_expected(outcomes, most):
    """Every build ended ACTIVE or in ERROR for want of a node, and at most ``most``
    are ACTIVE (what the nodes have room for)."""
    active = [state for state, _ in outcomes.values() if state == "active"]
    failed = [fault for state, fault in outcomes.values() if state != "active"]
    assert 0 < len(active) <= most
    assert all(fault and "No valid host" in fault for fault in failed), failed


# ----------------------------------------------------------------- races


def test_concurrent_boots_never_allocate_more_of_a_node_than_it_has(start, reschedules):
    plane = start(MIXED)

    # NOTE: two instances fit a node by vCPUs, so at most six of the twelve can run.
    with _watching_overcommits() as overcommits:
        outcomes = flows.boot_at_once(plane, ["gpu:1", "vf:1", "pf:1", None] * 3, **FLAVOR)

    _assert_builds_ended_as_expected(outcomes, most=6)
    assert overcommits == []
    with dbaccess.granted():
        assert _overcommits(plane.context) == []
    assert reschedules == []


def test_concurrent_boots_allocate_each_active_instance_exactly_what_it_holds(start, reschedules):
    plane = start(MIXED)

    outcomes = flows.boot_at_once(plane, ["gpu:1", "vf:1", "pf:1", None] * 3, **FLAVOR)

    _assert_allocations_are_what_active_instances_hold(plane, outcomes, FLAVOR)
    assert reschedules == []


def test_concurrent_pf_and_vf_boots_never_give_a_vf_of_a_pf_another_instance_holds(
    start, reschedules
):
    plane = start(NICS)

    with _watching_overcommits() as overcommits:
        outcomes = flows.boot_at_once(plane, ["pf:1", "vf:1"] * 5, vcpus=1)

    # NOTE: 2 nodes x 2 PFs, each a PF or its 2 VFs: at most 8 instances.
    _assert_builds_ended_as_expected(outcomes, most=8)
    rows = flows.held_devices()
    holder = {(row["compute_node_id"], row["address"]): row["instance_uuid"] for row in rows}
    for row in rows:
        if row["dev_type"] == "type-VF":
            pf_holder = holder.get((row["compute_node_id"], row["parent_addr"]))
            assert pf_holder in (None, row["instance_uuid"]), row
    assert overcommits == []
    _assert_allocations_are_what_active_instances_hold(plane, outcomes, {**FLAVOR, "vcpus": 1})
    assert reschedules == []


def test_boots_outnumbering_every_services_handler_threads_all_become_active(
    start, config, reschedules
):
    # NOTE: one handler thread an RPC server: were a handler ever to wait for another
    # service's handler that waits for it, these boots would hang here.
    with config_overrides.overridden(config, {("executor_thread_pool_size", None): 1}):
        plane = start(MIXED)

        # NOTE: any two of these fit a node, as any node's two PFs and their VFs give.
        outcomes = flows.boot_at_once(plane, ["pf:1", "vf:1", None] * 2, **FLAVOR)

    assert len(outcomes) == 6
    assert {uuid: end for uuid, end in outcomes.items() if end[0] != "active"} == {}
    _assert_allocations_are_what_active_instances_hold(plane, outcomes, FLAVOR)
    assert reschedules == []


# ------------------------------------------------------- two conductors


# Two compute hosts of two nodes, one GPU each: four GPUs in all.
TWO_NODE_HOSTS = {f"host-{h}": [f"node-{h}{n}=gpus=1" for n in "ab"] for h in range(2)}


@contextlib.contextmanager
def _second_conductor(plane):
    """Another conductor serving the plane's conductor topic, with a scheduler (and
    cached view of the nodes) of its own."""
    second = conductor_service.ConductorService(
        plane.conductor.transport_url, plane.conductor.topic
    )
    second.start()
    try:
        yield second
    finally:
        second.stop()


def test_boots_for_the_last_devices_through_two_conductors_give_each_device_one_winner(
    db, reschedules
):
    # NOTE: the transport shares the boots between the two conductors as it delivers
    # them; test_generation_conflicts.py forces two schedulers' views to race.
    drivers = {host: SimulatedDriver.from_config(nodes) for host, nodes in TWO_NODE_HOSTS.items()}
    with (
        testing.ControlPlane(drivers, flows.SPECS, flows.ALIASES) as plane,
        _second_conductor(plane),
    ):
        outcomes = flows.boot_at_once(plane, ["gpu:1"] * 8, **FLAVOR)

        active = sorted(uuid for uuid, (state, _) in outcomes.items() if state == "active")
        assert len(active) == 4
        _assert_builds_ended_as_expected(outcomes, most=4)
        holders = flows.holders()
        assert sorted(holders) == active
        assert all(len(places) == 1 for places in holders.values())
        assert len({place for places in holders.values() for place in places}) == 4
        _assert_allocations_are_what_active_instances_hold(plane, outcomes, FLAVOR)
    assert reschedules == []
