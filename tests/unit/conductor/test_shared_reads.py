"""A read shared by the requests that asked while another ran: each request gets a read
that began after it asked, and a failed read is shared with nobody."""

import threading
import time

import pytest

from pcisim.conductor import shared_reads

WAIT_S = 30


class _Script:
    """A read that answers its own number, holding read ``hold`` until released, and
    raising at read ``fail``."""

    def __init__(self, hold=None, fail=None):
        self.hold, self.fail, self.count = hold, fail, 0
        self.holding, self.release = threading.Event(), threading.Event()

    def __call__(self, context):
        self.count += 1
        number = self.count
        if number == self.hold:
            self.holding.set()
            assert self.release.wait(WAIT_S)
        if number == self.fail:
            raise RuntimeError(f"read {number} failed")
        return number


class _Caller(threading.Thread):
    def __init__(self, shared):
        super().__init__(daemon=True)
        self.shared, self.answer, self.error = shared, None, None
        self.start()

    def run(self):
        try:
            self.answer = self.shared("context")
        except RuntimeError as error:
            self.error = str(error)


def _wait_until(condition):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def _callers_during_read_one(shared, script, count):
    first = _Caller(shared)
    assert script.holding.wait(WAIT_S)
    others = [_Caller(shared) for _ in range(count)]
    _wait_until(lambda: shared.waiting() == count)
    script.release.set()
    for caller in [first, *others]:
        caller.join(WAIT_S)
    return first, others


def test_a_caller_alone_reads_for_itself():
    shared = shared_reads.SharedRead(_Script())

    assert [shared("context"), shared("context")] == [1, 2]
    assert shared.reads() == 2


def test_callers_arriving_during_a_read_share_the_next_one_not_that_one():
    script = _Script(hold=1)
    shared = shared_reads.SharedRead(script)

    first, others = _callers_during_read_one(shared, script, 3)

    assert first.answer == 1
    assert [caller.answer for caller in others] == [2, 2, 2]
    assert shared.reads() == 2


def test_a_failed_read_is_not_shared():
    script = _Script(hold=1, fail=2)
    shared = shared_reads.SharedRead(script)

    first, others = _callers_during_read_one(shared, script, 2)

    assert first.answer == 1
    outcomes = {(caller.answer, caller.error) for caller in others}
    assert outcomes == {(None, "read 2 failed"), (3, None)}


def test_the_error_of_a_read_reaches_the_caller_that_ran_it():
    shared = shared_reads.SharedRead(_Script(fail=1))

    with pytest.raises(RuntimeError, match="read 1 failed"):
        shared("context")
    assert shared("context") == 2
