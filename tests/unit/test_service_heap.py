"""A served process keeps what its start-up built out of later garbage collections."""

import gc
import weakref

import pytest

from pcisim import service


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_process_freezes_its_heap_before_it_says_it_is_ready(unfrozen):
    frozen_when_started = []

    service._announce_ready([], lambda: frozen_when_started.append(gc.get_freeze_count()))

    assert frozen_when_started[0] > 0


class _Cycle:
    def __init__(self):
        self.itself = self


def test_start_up_garbage_is_collected_not_frozen(unfrozen):
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage

    service.freeze_startup_heap()

    assert gone() is None
