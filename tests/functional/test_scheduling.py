"""Scheduling with allocations, through the whole in-process control plane: what is
not a race between boots.

A lost compare-and-swap is chosen again inside the conductor, from a fresh view, never
rescheduled; ``[filter_scheduler] host_subset_size`` is how many of the best nodes a
boot is chosen among; a compute that restarts heals its node's allocations; a node's
generation moves when its inventory or allocations change, and only then. The races
are in test_scheduling_races.py. SQLite: the conductor's database work is tested on
every backend elsewhere.
"""

import uuid

import pytest

from pcisim import context as pcisim_context
from pcisim import dbaccess, faults, testing
from pcisim.conductor import scheduler
from pcisim.db import allocations as db_allocations
from pcisim.objects.instance import Instance
from pcisim.objects.instance_fault import InstanceFaultList
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.pci import capacity
from tests import backends, config_overrides
from tests.functional import flows

# Free memory orders the nodes: big-node first, then mid-node, then small-node.
BY_MEMORY = {
    "big": "big-node=memory_mb=32768",
    "mid": "mid-node=memory_mb=16384",
    "small": "small-node=memory_mb=8192",
}


@pytest.fixture(scope="session")
def database(tmp_path_factory):
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


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
    start, reschedules
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
    (node,) = flows.nodes(plane)
    assert set(flows.allocations_by_node()[node.id]) == {instance_uuid, *competitors}
    assert len(competitors) == 1


def test_a_choice_made_again_after_a_lost_swap_sees_what_the_winner_took(start, reschedules):
    # NOTE: the competitor takes gpu-node's only GPU after it was chosen; choosing
    # from the old view again would put the instance there anyway.
    plane = start({"gpu-host": "gpu-node=gpus=1", "other-host": "other-node=gpus=1"})
    (gpu_pool,) = PciDevicePoolList.from_json(flows.nodes(plane)[0].pci_inventory).objects
    claim_first, _ = _allocate_first({capacity.resource_name(gpu_pool): 1})
    first_choice = []

    def remember_and_take(instance, node_id):
        first_choice.append(node_id)
        claim_first(instance, node_id)

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(remember_and_take)):
        instance_uuid, state = flows.boot(plane, "gpu:1")

    assert state == "active"
    assert reschedules == []
    (placed,) = flows.allocations_of(plane, instance_uuid)
    assert placed != first_choice[0]


def test_a_boot_that_keeps_losing_the_swap_ends_in_no_valid_host_without_a_reschedule(
    start, reschedules
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
    assert flows.allocations_of(plane, instance_uuid) == {}
    assert flows.held_devices() == []


# ------------------------------------------------------ host_subset_size


def _hosts_of_boots(plane, count):
    """Boot ``count`` instances one after another: the host of each."""
    hosts = []
    for _ in range(count):
        instance_uuid, state = flows.boot(plane, None)
        assert state == "active"
        hosts.append(Instance.get_by_uuid(plane.context, instance_uuid).host)
    return hosts


def test_a_host_subset_of_one_puts_every_boot_on_the_node_with_most_free_memory(start, config):
    plane = start(BY_MEMORY)

    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}):
        assert _hosts_of_boots(plane, 4) == ["big"] * 4


class _Chooser:
    """The scheduler's random choice, recording what it was offered and taking the
    last (the node with the least free memory of those offered); these nodes differ
    in free memory, so the random order of ties plays no part."""

    def __init__(self):
        self.offered = []

    @staticmethod
    def randrange(start, stop):
        return start

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
    start, config, monkeypatch, size, offered, hosts
):
    plane = start(BY_MEMORY)
    chooser = _Chooser()
    monkeypatch.setattr(scheduler, "random", chooser)

    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): size}):
        assert _hosts_of_boots(plane, 2) == hosts

    assert chooser.offered == [offered, offered]


# ------------------------------------------------------------- healing


def test_a_restarted_compute_writes_back_the_allocations_of_the_instances_it_holds(start):
    plane = start({"nic-host": "nic-node=pfs=1,vfs_per_pf=2,gpus=1"})
    gpu_vm, _ = flows.boot(plane, "gpu:1")
    vf_vm, _ = flows.boot(plane, "vf:2")
    before = {vm: flows.allocations_of(plane, vm) for vm in (gpu_vm, vf_vm)}
    with dbaccess.granted():
        for vm in before:
            db_allocations.release(plane.context, vm)
    assert [flows.allocations_of(plane, vm) for vm in before] == [{}, {}]

    plane.restart_compute("nic-host")

    assert {vm: flows.allocations_of(plane, vm) for vm in before} == before


def test_a_restarted_compute_removes_an_allocation_no_instance_of_its_node_holds(start):
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")
    (node,) = flows.nodes(plane)
    stray = str(uuid.uuid4())
    with dbaccess.granted():
        db_allocations.claim(plane.context, node.id, node.generation, stray, {"VCPU": 1})

    plane.restart_compute("gpu-host")

    assert set(flows.allocations_by_node()[node.id]) == {instance_uuid}


# ------------------------------------------------- generations of a node


def _generation(plane, host):
    (node,) = [node for node in flows.nodes(plane) if node.host == host]
    return node.generation


def test_a_periodic_run_that_changes_nothing_keeps_the_nodes_generation(start):
    # NOTE: every bump makes a scheduler that read the node before choose again.
    plane = start({"gpu-host": "gpu-node=gpus=2,pfs=1,vfs_per_pf=2"})
    flows.boot(plane, "gpu:1")
    flows.boot(plane, "vf:1")
    plane.run_periodic()
    before = _generation(plane, "gpu-host")

    plane.run_periodic()
    plane.run_periodic()

    assert _generation(plane, "gpu-host") == before


def test_a_boot_moves_the_nodes_generation_once_for_its_allocation_not_for_its_claim(start):
    # NOTE: the compute's save of its usage and devices changes no inventory; were it
    # to bump the generation, every build would make the schedulers choose again.
    plane = start({"gpu-host": "gpu-node=gpus=2"})
    before = _generation(plane, "gpu-host")

    flows.boot(plane, "gpu:1")

    assert _generation(plane, "gpu-host") == before + 1


# ------------------------------------------- a claim written with its allocation


def _node(plane, host):
    (node,) = [node for node in flows.nodes(plane) if node.host == host]
    return node


def _free_in_pools(node):
    return sum(pool.count for pool in PciDevicePoolList.from_json(node.pci_stats).objects)


def _written_during_spawn(plane, host, request):
    """Boot ``request`` and return the instance's uuid and what the database held while
    its compute started the guest: the statuses of the devices the instance held, the
    node's memory used and its free devices."""
    seen = {}

    def look(instance):
        node = _node(plane, host)
        seen["devices"] = [row["status"] for row in flows.devices(instance_uuid=instance.uuid)]
        seen["memory_mb_used"], seen["free"] = node.memory_mb_used, _free_in_pools(node)

    with faults.inject(faults.BETWEEN_CLAIM_AND_ALLOCATE, look):
        instance_uuid, state = flows.boot(plane, request, memory_mb=1024)
    assert state == "active"
    return instance_uuid, seen


def test_a_claim_under_an_allocation_is_written_with_the_allocation_once_the_guest_runs(start):
    plane = start({"gpu-host": "gpu-node=gpus=2"})

    instance_uuid, during = _written_during_spawn(plane, "gpu-host", "gpu:1")

    assert during == {"devices": [], "memory_mb_used": 0, "free": 2}
    node = _node(plane, "gpu-host")
    assert [row["status"] for row in flows.devices(instance_uuid=instance_uuid)] == ["allocated"]
    assert (node.memory_mb_used, _free_in_pools(node)) == (1024, 1)
    assert flows.allocations_of(plane, instance_uuid)


def test_a_claim_without_an_allocation_is_written_before_the_guest_starts(start, config):
    # NOTE: the legacy scheduler reads the pools the claim leaves.
    plane = start({"gpu-host": "gpu-node=gpus=2"})

    with config_overrides.overridden(config, {("claim_mode", "scheduler"): "legacy"}):
        instance_uuid, during = _written_during_spawn(plane, "gpu-host", "gpu:1")

    assert during == {"devices": ["claimed"], "memory_mb_used": 1024, "free": 1}
    assert [row["status"] for row in flows.devices(instance_uuid=instance_uuid)] == ["allocated"]


def test_a_device_plugged_in_bumps_the_generation_and_can_be_allocated(start):
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    flows.boot(plane, "gpu:1")
    before = _generation(plane, "gpu-host")
    gpu = {"address": "0000:99:00.0", "vendor_id": "10de", "product_id": "1eb8"}
    plane.drivers["gpu-host"].hot_plug("gpu-node", gpu | {"dev_type": "type-PCI"})

    plane.run_periodic()

    assert _generation(plane, "gpu-host") > before
    instance_uuid, state = flows.boot(plane, "gpu:1")
    assert state == "active"
    assert [row["address"] for row in flows.devices(instance_uuid=instance_uuid)] == [
        gpu["address"]
    ]


def test_deleting_an_instance_releases_its_allocation_and_bumps_the_generation(start):
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")
    before = _generation(plane, "gpu-host")

    flows.delete(plane, instance_uuid)

    assert flows.allocations_of(plane, instance_uuid) == {}
    assert _generation(plane, "gpu-host") > before
    assert flows.boot(plane, "gpu:1")[1] == "active"


def test_destroying_an_instance_leaves_its_allocation_to_its_compute(start):
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")
    instance = Instance.get_by_uuid(plane.context, instance_uuid)

    instance.destroy()  # through the conductor, as the compute's delete does

    assert flows.allocations_of(plane, instance_uuid) != {}


@pytest.mark.parametrize("ending", ["destroy", "error"])
def test_an_instance_ended_by_a_compute_older_than_instance_1_3_releases_its_allocation(
    start, ending
):
    # NOTE: such a compute frees devices without ending allocations (ComputeNode 1.4).
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")
    instance = Instance.get_by_uuid(plane.context, instance_uuid)
    instance.VERSION = "1.2"  # what such a compute sends

    if ending == "destroy":
        instance.destroy()
    else:
        instance.vm_state = "error"
        instance.save()

    assert flows.allocations_of(plane, instance_uuid) == {}


def test_a_periodic_run_ends_the_allocation_of_a_delete_that_stopped_half_way(start):
    # NOTE: no periodic run between the boot and the delete, so the node's instances
    # are what they were at its last heal (none): its clean-up alone must end it.
    plane = start({"gpu-host": "gpu-node=gpus=1"})
    instance_uuid, _ = flows.boot(plane, "gpu:1")

    def stop(instance):
        raise RuntimeError("the compute stopped here")

    with faults.inject(faults.AFTER_SOFT_DELETE, faults.once(stop)):
        plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
        plane.wait_for(instance_uuid, done=("deleted",))
    assert flows.allocations_of(plane, instance_uuid)

    plane.run_periodic()

    assert flows.allocations_of(plane, instance_uuid) == {}
    assert flows.held_devices() == []


def test_a_build_that_fails_on_its_compute_releases_its_allocation(start):
    plane = start({"gpu-host": "gpu-node=gpus=1"})

    def fail(instance):
        raise RuntimeError("the hypervisor refused the guest")

    with faults.inject(faults.BETWEEN_CLAIM_AND_ALLOCATE, faults.once(fail)):
        failed, state = flows.boot(plane, "gpu:1")

    assert state == "error"
    # NOTE: ERROR is saved before the compute frees the GPU (claimed in its memory
    # only), and the allocation ends in the transaction that frees it.
    testing.wait_until(
        lambda: not flows.allocations_of(plane, failed), what="the failed build's GPU released"
    )
    assert flows.held_devices() == []
    assert flows.boot(plane, "gpu:1")[1] == "active"


def test_a_boot_while_a_failed_build_is_freeing_its_devices_is_not_sent_to_that_node(
    start, config, reschedules
):
    plane = start({"big": "big-node=gpus=1,memory_mb=262144", "small": "small-node=gpus=1"})
    failing, second = [], {}

    def fail(instance):
        failing.append(instance.uuid)
        raise RuntimeError("the hypervisor refused the guest")

    def boot_meanwhile(node):
        # NOTE: in the compute's thread, the failed build in ERROR, its GPU not freed.
        if failing and node == "big-node" and not second:
            second["outcome"] = flows.boot(plane, "gpu:1")

    with (
        config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}),
        faults.inject(faults.BETWEEN_CLAIM_AND_ALLOCATE, faults.once(fail)),
        faults.inject(faults.BEFORE_TRACKER_SAVE, boot_meanwhile),
    ):
        flows.boot(plane, "gpu:1")
        testing.wait_until(lambda: second, what="the boot meanwhile")

    second_uuid, state = second["outcome"]
    assert state == "active"
    assert Instance.get_by_uuid(plane.context, second_uuid).node == "small-node"
    assert reschedules == []


def test_a_boot_while_a_delete_is_freeing_the_devices_is_not_sent_to_that_node(
    start, config, reschedules
):
    plane = start({"big": "big-node=gpus=1,memory_mb=262144", "small": "small-node=gpus=1"})
    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}):
        first, _ = flows.boot(plane, "gpu:1")
        second = {}

        def boot_meanwhile(instance):
            # NOTE: in the compute's thread, between the soft-delete and the free.
            second["outcome"] = flows.boot(plane, "gpu:1")

        with faults.inject(faults.AFTER_SOFT_DELETE, faults.once(boot_meanwhile)):
            flows.delete(plane, first)

    (_, state) = second["outcome"]
    assert state == "active"
    assert reschedules == []
