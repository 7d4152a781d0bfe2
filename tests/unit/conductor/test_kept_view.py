"""A scheduler chooses from the view it last read for ``[scheduler] view_max_age``
seconds: its own claims move that view, what others change it may miss, and the
node's generation or a read before "no room" puts that right."""

import contextlib
import time
import uuid

import pytest

from pcisim import exception
from pcisim.compute import BINARY
from pcisim.conductor import scheduler
from pcisim.db import allocations
from pcisim.db import api as db_api
from pcisim.objects.instance import Instance
from tests import config_overrides
from tests.unit.db import factories

AN_HOUR = 3600.0


@pytest.fixture
def max_age(config):
    """Set ``[scheduler] view_max_age`` for the test."""

    with contextlib.ExitStack() as stack:
        yield lambda seconds: stack.enter_context(
            config_overrides.overridden(config, {("view_max_age", "scheduler"): seconds})
        )


def _up_node(ctxt, vcpus, host="host1"):
    node = factories.compute_node(ctxt, host=host, node=host, vcpus=vcpus)
    factories.compute_service_up(ctxt, node.host)
    return node


def _small_instance(ctxt):
    instance = Instance(ctxt, uuid=str(uuid.uuid4()), vcpus=1, memory_mb=512, root_gb=1)
    instance.pci_requests = None
    return instance


def _claim(chooser, ctxt):
    return chooser.claim_destination(ctxt, _small_instance(ctxt))


def test_choices_within_the_max_age_share_one_read_and_see_their_own_claims(db, ctxt, max_age):
    max_age(AN_HOUR)
    _up_node(ctxt, vcpus=2)
    chooser = scheduler.Scheduler()

    _claim(chooser, ctxt)
    _claim(chooser, ctxt)
    with pytest.raises(exception.NoValidHost, match="no node has 1 vCPUs"):
        _claim(chooser, ctxt)

    # one read kept for two choices, and one again before the answer "no room"
    assert chooser.view.reads() == 2


def test_a_max_age_of_0_reads_the_view_before_every_choice(db, ctxt, max_age):
    max_age(0)
    _up_node(ctxt, vcpus=3)
    chooser = scheduler.Scheduler()

    for _ in range(3):
        _claim(chooser, ctxt)

    assert chooser.view.reads() == 3


def test_a_view_older_than_its_max_age_is_read_again(db, ctxt, max_age):
    max_age(0.05)
    _up_node(ctxt, vcpus=2)
    chooser = scheduler.Scheduler()

    _claim(chooser, ctxt)
    time.sleep(0.06)
    _claim(chooser, ctxt)

    assert chooser.view.reads() == 2


def test_a_claim_the_kept_view_made_stale_is_refused_and_chosen_again_from_a_read(
    db, ctxt, max_age
):
    max_age(AN_HOUR)
    node = _up_node(ctxt, vcpus=3)
    chooser = scheduler.Scheduler()
    _claim(chooser, ctxt)
    generation = allocations.host_states(ctxt, [node.id])[0][0].generation
    allocations.claim(ctxt, node.id, generation, "another conductor's", {"VCPU": 1})
    conflicts = scheduler.generation_conflicts()

    host, _, allocation, _ = _claim(chooser, ctxt)

    assert host == node.host
    assert scheduler.generation_conflicts() - conflicts == 1
    assert chooser.view.reads() == 2
    used = allocations.host_states(ctxt, [node.id])[1][node.id]
    assert used["VCPU"] == 3


def test_room_freed_by_others_is_found_by_a_read_before_no_valid_host(db, ctxt, max_age):
    max_age(AN_HOUR)
    _up_node(ctxt, vcpus=1)
    chooser = scheduler.Scheduler()
    first = _small_instance(ctxt)
    chooser.claim_destination(ctxt, first)
    allocations.release(ctxt, first.uuid)

    host, _, allocation, _ = _claim(chooser, ctxt)

    assert allocation == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
    assert chooser.view.reads() == 2


def test_a_host_that_went_down_is_left_out_once_the_view_is_read_again(db, ctxt, max_age):
    max_age(0.05)
    _up_node(ctxt, vcpus=4, host="going")
    other = _up_node(ctxt, vcpus=4, host="staying")
    chooser = scheduler.Scheduler()
    _claim(chooser, ctxt)
    going = db_api.service_get_by_host_and_binary(ctxt, "going", BINARY)
    db_api.service_update(ctxt, going.id, {"forced_down": True})
    time.sleep(0.06)

    hosts = {_claim(chooser, ctxt)[0] for _ in range(3)}

    assert hosts == {other.host}
