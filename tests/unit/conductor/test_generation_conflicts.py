"""A lost compare-and-swap is chosen again inside the scheduler, and counted."""

import uuid

import pytest
from oslo_db import exception as db_exc

from pcisim import exception, faults
from pcisim.conductor import scheduler
from pcisim.db import allocations
from pcisim.objects.instance import Instance
from tests.unit.db import factories


def _up_node(ctxt):
    node = factories.compute_node(ctxt)
    factories.compute_service_up(ctxt, node.host)
    return node


def test_a_swap_lost_to_another_claim_is_chosen_again_and_counted(db, ctxt):
    node = _up_node(ctxt)
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None
    lost = []

    def another_claim(node_id, **details):
        if not lost:
            generation = allocations.host_states(ctxt, [node_id])[0][0].generation
            lost.append(allocations.claim(ctxt, node_id, generation, "other", {"VCPU": 1}))

    before = scheduler.generation_conflicts()
    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, another_claim):
        host, nodename, allocation, _ = scheduler.Scheduler().claim_destination(ctxt, instance)

    assert (host, nodename) == (node.host, node.hypervisor_hostname)
    assert allocation == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
    assert scheduler.generation_conflicts() - before == 1


def test_a_claim_rolled_back_by_a_deadlock_is_chosen_again(db, ctxt):
    node = _up_node(ctxt)
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None

    def deadlock(**details):
        raise db_exc.DBDeadlock()

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(deadlock)):
        host, _, allocation, _ = scheduler.Scheduler().claim_destination(ctxt, instance)

    assert host == node.host
    assert allocations.get_by_consumer(ctxt, instance.uuid) == {node.id: allocation}


def test_two_schedulers_choosing_the_last_room_from_their_own_views_give_it_to_one(db, ctxt):
    # NOTE: two conductors, each with its view cached: the second decides between the
    # first's choice and its claim, from the same view; the first's swap then fails,
    # and a fresh view has no room left.
    node = factories.compute_node(ctxt, vcpus=1)
    factories.compute_service_up(ctxt, node.host)
    first, second = scheduler.Scheduler(), scheduler.Scheduler()
    for chooser in (first, second):
        chooser.host_states.current(ctxt)
    winner, loser = _small_instance(ctxt), _small_instance(ctxt)

    def second_decides(**details):
        second.claim_destination(ctxt, winner)

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(second_decides)):
        with pytest.raises(exception.NoValidHost, match="no node has 1 vCPUs"):
            first.claim_destination(ctxt, loser)

    assert allocations.get_by_consumer(ctxt, winner.uuid) == {
        node.id: {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
    }
    assert allocations.get_by_consumer(ctxt, loser.uuid) == {}


def _small_instance(ctxt):
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None
    return instance
