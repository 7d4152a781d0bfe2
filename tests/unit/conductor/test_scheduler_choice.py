"""How the scheduler chooses among nodes that fit."""

import uuid

from pcisim.conductor import scheduler
from pcisim.db import allocations
from pcisim.objects.instance import Instance
from tests import config_overrides
from tests.unit.db import factories

HOSTS = [f"host{n}" for n in range(10)]


def _nodes_up(ctxt, hosts):
    for host in hosts:
        factories.compute_node(ctxt, host=host, node=host)
        factories.compute_service_up(ctxt, host)


def _choice(ctxt, chooser):
    """The host ``chooser`` chooses for a small instance; its allocation released, so
    every choice sees the same nodes."""
    instance = Instance(uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None
    host, _, _, _ = chooser.claim_destination(ctxt, instance)
    allocations.release(ctxt, instance.uuid)
    return host


def test_nodes_tied_for_best_are_chosen_at_random_even_with_a_subset_of_one(db, ctxt, config):
    _nodes_up(ctxt, HOSTS)

    chooser = scheduler.Scheduler()
    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}):
        chosen = {_choice(ctxt, chooser) for _ in range(40)}

    assert len(chosen) > 1


def test_a_subset_of_one_takes_the_node_with_the_most_free_memory(db, ctxt, config):
    _nodes_up(ctxt, HOSTS)
    factories.compute_node(ctxt, host="big", node="big", memory_mb=10 * 65536)
    factories.compute_service_up(ctxt, "big")

    chooser = scheduler.Scheduler()
    with config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}):
        chosen = {_choice(ctxt, chooser) for _ in range(10)}

    assert chosen == {"big"}
