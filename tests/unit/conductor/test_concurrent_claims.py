"""Threads of one scheduler never lose a compare-and-swap to each other: a thread
claiming on a node steers the others elsewhere, and those that chose it anyway claim
after it, from the node as it left it."""

import threading
import time
import uuid

from pcisim import context as pcisim_context
from pcisim import exception, faults
from pcisim.conductor import scheduler
from pcisim.db import allocations
from pcisim.objects.instance import Instance
from tests import config_overrides
from tests.unit.db import factories

WAIT_S = 30


def _up_nodes(ctxt, count, vcpus=2):
    nodes = []
    for n in range(count):
        node = factories.compute_node(ctxt, host=f"host{n}", node=f"host{n}", vcpus=vcpus)
        factories.compute_service_up(ctxt, node.host)
        nodes.append(node)
    return nodes


def _small_instance():
    instance = Instance(uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None
    return instance


class _Boot(threading.Thread):
    """A claim_destination in a thread of its own, as a conductor's RPC server runs one."""

    def __init__(self, chooser):
        super().__init__(daemon=True)
        self.chooser, self.instance = chooser, _small_instance()
        self.answer = self.refusal = None

    def run(self):
        ctxt = pcisim_context.get_admin_context()
        try:
            self.answer = self.chooser.claim_destination(ctxt, self.instance)
        except exception.NoValidHost as refusal:
            self.refusal = refusal.kwargs["reason"]


def _wait_until(condition):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the other boot never came to the node"
        time.sleep(0.001)


def test_a_node_another_thread_is_claiming_on_is_chosen_last(db, ctxt, config):
    _up_nodes(ctxt, 1)
    big = factories.compute_node(ctxt, host="big", node="big", memory_mb=10 * 65536)
    factories.compute_service_up(ctxt, big.host)
    chooser = scheduler.Scheduler()
    other = _Boot(chooser)

    def other_boot_meanwhile(node_id, **details):
        other.start()
        other.join(WAIT_S)

    before = scheduler.generation_conflicts()
    with (
        config_overrides.overridden(config, {("host_subset_size", "filter_scheduler"): 1}),
        faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(other_boot_meanwhile)),
    ):
        host, _, _, _ = chooser.claim_destination(ctxt, _small_instance())

    assert (host, other.answer[0]) == ("big", "host0")
    assert scheduler.generation_conflicts() == before


def test_threads_that_chose_one_node_claim_it_one_after_the_other_without_a_conflict(db, ctxt):
    (node,) = _up_nodes(ctxt, 1)
    chooser = scheduler.Scheduler()
    first, second = _small_instance(), _Boot(chooser)

    def second_waits_for_the_node(node_id, **details):
        second.start()
        _wait_until(lambda: chooser.host_states.busy()[node_id] == 2)

    before = scheduler.generation_conflicts()
    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(second_waits_for_the_node)):
        chooser.claim_destination(ctxt, first)
    second.join(WAIT_S)

    assert second.answer is not None
    assert allocations.get_by_consumer(ctxt, first.uuid).keys() == {node.id}
    assert allocations.get_by_consumer(ctxt, second.instance.uuid).keys() == {node.id}
    assert scheduler.generation_conflicts() == before
    assert chooser.host_states.busy() == {}


def test_a_thread_that_waited_for_the_last_room_is_told_there_is_none(db, ctxt):
    _up_nodes(ctxt, 1, vcpus=1)
    chooser = scheduler.Scheduler()
    first, second = _small_instance(), _Boot(chooser)

    def second_waits_for_the_node(node_id, **details):
        second.start()
        _wait_until(lambda: chooser.host_states.busy()[node_id] == 2)

    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(second_waits_for_the_node)):
        chooser.claim_destination(ctxt, first)
    second.join(WAIT_S)

    assert second.refusal == "no node has 1 vCPUs, 512 MB of memory and 1 GB of disk free"
    assert allocations.get_by_consumer(ctxt, second.instance.uuid) == {}


def test_a_swap_lost_to_a_claim_of_the_same_scheduler_keeps_its_view_true(db, ctxt):
    # NOTE: the injected claim runs in the claiming thread itself, so it moves the
    # node under the first claim's feet: that one loses its swap, and chooses again
    # from the view the injected claim left, which is what the database holds.
    _up_nodes(ctxt, 1)
    chooser = scheduler.Scheduler()
    first, injected = _small_instance(), _small_instance()

    def claim_meanwhile(**details):
        chooser.claim_destination(ctxt, injected)

    before = scheduler.generation_conflicts()
    with faults.inject(faults.BEFORE_ALLOCATION_CLAIM, faults.once(claim_meanwhile)):
        chooser.claim_destination(ctxt, first)

    assert scheduler.generation_conflicts() - before == 1
    assert _view(chooser, ctxt) == _view(scheduler.Scheduler(), ctxt)


def _view(chooser, ctxt):
    return {node.id: (node.generation, node.used) for node in chooser.host_states.current(ctxt)}


def test_requests_that_ask_during_a_view_read_share_the_next_read(db, ctxt):
    _up_nodes(ctxt, 3)
    chooser = scheduler.Scheduler()
    others = [_Boot(chooser), _Boot(chooser)]

    def others_ask_meanwhile(**details):
        for boot in others:
            boot.start()
        _wait_until(lambda: chooser.view.waiting() == len(others))

    with faults.inject(faults.BEFORE_VIEW_READ, faults.once(others_ask_meanwhile)):
        chooser.claim_destination(ctxt, _small_instance())
    for boot in others:
        boot.join(WAIT_S)

    assert all(boot.answer is not None for boot in others)
    assert chooser.view.reads() == 2


def test_a_claim_noted_while_another_thread_reads_the_view_is_not_read_again(db, ctxt, monkeypatch):
    # NOTE: the claim runs in the reading thread, once its read of the generations is
    # done and before it keeps what it read: as a claim of another thread would.
    _up_nodes(ctxt, 2)
    chooser = scheduler.Scheduler()
    _view(chooser, ctxt)
    scheduler.Scheduler().claim_destination(ctxt, _small_instance())
    read, reads = allocations.changed_host_states, []

    def read_then_claim(*args, **kwargs):
        reads.append(args)
        states = read(*args, **kwargs)
        if len(reads) == 1:
            chooser.claim_destination(ctxt, _small_instance())
        return states

    monkeypatch.setattr(allocations, "changed_host_states", read_then_claim)
    _view(chooser, ctxt)
    reads_while_claiming = len(reads)
    seen = _view(chooser, ctxt)

    assert len(reads) == reads_while_claiming == 2
    assert seen == _view(scheduler.Scheduler(), ctxt)
