"""Scheduling with allocations, through the whole in-process control plane.

Concurrent boots never allocate more of a node than it has, and what each running
instance is allocated is exactly what it holds; PF/VF exclusivity holds when PF and
VF servers race; a lost compare-and-swap is chosen again inside the conductor, never
rescheduled; ``[filter_scheduler] host_subset_size`` decides how far boots spread;
and a compute that restarts writes back the allocations of the instances it holds.

The races run on every backend (each serializes the swap's row update its own way);
the rest on SQLite.
"""

import collections
import contextlib
import types
import uuid

import pytest

from pcisim import context as pcisim_context
from pcisim import dbaccess, faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import scheduler
from pcisim.db import allocations as db_allocations
from pcisim.db import api as db_api
from pcisim.objects.instance import Instance
from pcisim.objects.instance_fault import InstanceFaultList
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends, config_overrides
from tests.functional import flows

SPECS = DeviceSpecList.from_config(['{"vendor_id": "8086"}', '{"vendor_id": "10de"}'])
ALIASES = parse_aliases(
    [
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    ]
)
FLAVOR = {"vcpus": 2, "memory_mb": 512, "root_gb": 1}
# Room for two instances of FLAVOR a node, which may both want devices.
MIXED = {f"host-{i}": f"node-{i}=vcpus=4,gpus=1,pfs=2,vfs_per_pf=1" for i in range(3)}
NICS = {f"nic-{i}": f"nic-node-{i}=pfs=2,vfs_per_pf=2" for i in range(2)}
# Free memory orders the nodes: big-node first, then mid-node, then small-node.
BY_MEMORY = {
    "big": "big-node=memory_mb=32768",
    "mid": "mid-node=memory_mb=16384",
    "small": "small-node=memory_mb=8192",
}


@pytest.fixture(scope="module", params=backends.BACKENDS)
def database(request, tmp_path_factory):
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def sqlite_only(database):
    if database.backend != "sqlite":
        pytest.skip("on SQLite only: see the module's docstring")


@pytest.fixture
def start(db):
    """Start a control plane of ``{host: '[compute] inventory' value}``."""
    planes = []

    def start_plane(hosts):
        drivers = {host: SimulatedDriver.from_config([spec]) for host, spec in hosts.items()}
        planes.append(testing.ControlPlane(drivers, SPECS, ALIASES).start())
        return planes[-1]

    yield start_plane
    for plane in planes:
        plane.stop()


def _nodes(plane):
    with dbaccess.granted():
        return db_api.compute_node_get_all(plane.context)


def _allocations():
    """{node id: {consumer: {resource: used}}} of every allocation."""
    found = collections.defaultdict(lambda: collections.defaultdict(dict))
    for row in flows.allocations():
        found[row["compute_node_id"]][row["consumer_uuid"]][row["resource"]] = row["used"]
    return found


def _held_resources(instance_uuid):
    """{PCI resource name: devices} of what the instance holds, from its device rows
    (no device_spec here sets tags)."""
    rows = flows.devices(instance_uuid=instance_uuid)
    return collections.Counter(
        capacity.resource_name(capacity.PoolKey.of(types.SimpleNamespace(**row), {}))
        for row in rows
    )


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
    node_ids = {(node.host, node.hypervisor_hostname): node.id for node in _nodes(plane)}
    active = sorted(uuid for uuid, (state, _) in outcomes.items() if state == "active")
    expected = {}
    for instance_uuid in active:
        instance = Instance.get_by_uuid(plane.context, instance_uuid)
        resources = {
            name: flavor[field] for name, field in capacity.FLAVOR_RESOURCES.items()
        } | dict(_held_resources(instance_uuid))
        expected[instance_uuid] = {node_ids[(instance.host, instance.node)]: resources}
    actual = collections.defaultdict(dict)
    for node_id, consumers in _allocations().items():
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


def test_concurrent_boots_allocate_each_active_instance_exactly_what_it_holds(
    sqlite_only, start, reschedules
):
    # NOTE: on SQLite only: the PF/VF race below checks the same on every backend.
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


# ------------------------------------------------------- lost swaps, retried


def _allocate_first(resources):
    """An injection at BEFORE_ALLOCATION_CLAIM that writes another consumer's
    allocation on the node just chosen, as a competing boot would; returns the
    competitors' uuids, one per injection."""
    competitors = []

    def claim_first(instance, node_id):
        # NOTE: in the conductor's thread, so in a context (a transaction) of its own.
        context = pcisim_context.get_admin_context()
        (row,), _ = db_allocations.host_states(context, [node_id])
        competitor = str(uuid.uuid4())
        db_allocations.claim(context, node_id, row.generation, competitor, resources)
        competitors.append(competitor)

    return claim_first, competitors


def test_a_lost_generation_swap_is_chosen_again_in_the_conductor_not_rescheduled(
    sqlite_only, start, reschedules
):
    plane = start({"gpu-host": "gpu-node=gpus=2"})
    claim_first, competitors = _allocate_first({"VCPU": 1})
    chosen = []

    with (
        faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(claim_first)),
        faults.inject(faults.BEFORE_ALLOCATION_CLAIM, lambda **details: chosen.append(details)),
    ):
        instance_uuid, state = flows.boot(plane, "gpu:1")

    assert state == "active"
    assert len(chosen) == 2  # chosen, lost to the competitor, chosen again
    assert reschedules == []
    (node,) = _nodes(plane)
    assert set(_allocations()[node.id]) == {instance_uuid, *competitors}
    assert len(competitors) == 1


def test_a_choice_made_again_after_a_lost_swap_sees_what_the_winner_took(
    sqlite_only, start, reschedules
):
    # NOTE: the competitor takes gpu-node's only GPU after it was chosen; choosing
    # from the old view again would put the instance there anyway.
    plane = start({"gpu-host": "gpu-node=gpus=1", "other-host": "other-node=gpus=1"})
    (gpu_pool,) = PciDevicePoolList.from_json(_nodes(plane)[0].pci_inventory).objects
    claim_first, _ = _allocate_first({capacity.resource_name(gpu_pool): 1})
    first_choice = []

    def remember_and_take(instance, node_id):
        first_choice.append(node_id)
        claim_first(instance, node_id)

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(remember_and_take)):
        instance_uuid, state = flows.boot(plane, "gpu:1")

    assert state == "active"
    assert reschedules == []
    (placed,) = _allocations_of(plane, instance_uuid)
    assert placed != first_choice[0]


def test_a_boot_that_keeps_losing_the_swap_ends_in_no_valid_host_without_a_reschedule(
    sqlite_only, start, reschedules
):
    plane = start({"gpu-host": "gpu-node=gpus=2"})
    claim_first, competitors = _allocate_first({"MEMORY_MB": 1})

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, claim_first):
        instance_uuid, state = flows.boot(plane, "gpu:1")

    assert state == "error"
    (fault,) = InstanceFaultList.get_by_instance_uuids(plane.context, [instance_uuid])
    assert "allocated by others first" in fault.message
    assert len(competitors) == scheduler.MAX_GENERATION_CONFLICTS
    assert reschedules == []
    assert _allocations_of(plane, instance_uuid) == {}
    assert flows.held_devices() == []


def _allocations_of(plane, instance_uuid):
    with dbaccess.granted():
        return db_allocations.get_by_consumer(plane.context, instance_uuid)


# ------------------------------------------------------ host_subset_size


def _hosts_of_boots(plane, count):
    """Boot ``count`` instances one after another: the host of each."""
    hosts = []
    for _ in range(count):
        instance_uuid, state = flows.boot(plane, None)
        assert state == "active"
        hosts.append(Instance.get_by_uuid(plane.context, instance_uuid).host)
    return hosts


def test_a_host_subset_of_one_puts_every_boot_on_the_node_with_most_free_memory(
    sqlite_only, start, config
):
    plane = start(BY_MEMORY)

    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}):
        assert _hosts_of_boots(plane, 4) == ["big"] * 4


class _Chooser:
    """The scheduler's random choice, recording what it was offered and taking the
    last (the node with the least free memory of those offered)."""

    def __init__(self):
        self.offered = []

    def choice(self, nodes):
        self.offered.append(sorted(node.host for node in nodes))
        return nodes[-1]


@pytest.mark.parametrize(
    ("size", "offered", "hosts"),
    [
        pytest.param(2, ["big", "mid"], ["mid", "mid"], id="2"),
        pytest.param(3, ["big", "mid", "small"], ["small", "small"], id="3"),
    ],
)
def test_the_host_subset_size_is_how_many_of_the_best_nodes_a_boot_is_chosen_among(
    sqlite_only, start, config, monkeypatch, size, offered, hosts
):
    plane = start(BY_MEMORY)
    chooser = _Chooser()
    monkeypatch.setattr(scheduler, "random", chooser)

    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): size}):
        assert _hosts_of_boots(plane, 2) == hosts

    assert chooser.offered == [offered, offered]


# ------------------------------------------------------------- healing


def test_a_restarted_compute_writes_back_the_allocations_of_the_instances_it_holds(
    sqlite_only, start
):
    plane = start({"nic-host": "nic-node=pfs=1,vfs_per_pf=2,gpus=1"})
    gpu_vm, _ = flows.boot(plane, "gpu:1")
    vf_vm, _ = flows.boot(plane, "vf:2")
    before = {vm: _allocations_of(plane, vm) for vm in (gpu_vm, vf_vm)}
    with dbaccess.granted():
        for vm in before:
            db_allocations.release(plane.context, vm)
    assert [_allocations_of(plane, vm) for vm in before] == [{}, {}]

    plane.restart_compute("nic-host")

    assert {vm: _allocations_of(plane, vm) for vm in before} == before


def test_a_restarted_compute_removes_an_allocation_no_instance_of_its_node_holds(
    sqlite_only, start
):
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")
    (node,) = _nodes(plane)
    stray = str(uuid.uuid4())
    with dbaccess.granted():
        db_allocations.claim(plane.context, node.id, node.generation, stray, {"VCPU": 1})

    plane.restart_compute("gpu-host")

    assert set(_allocations()[node.id]) == {instance_uuid}
