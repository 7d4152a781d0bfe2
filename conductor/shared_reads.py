"""One read for every thread that asks while another reads: concurrent requests of a
conductor share the read of the scheduler's view instead of each making its own.

A request needs a view at least as new as the moment it asked, so it can never take
the answer of a read already under way when it arrived (that read may have begun
before the request's own last write committed). It waits for that read to end; then
one of the requests that arrived meanwhile reads once for all of them (in
bench.scale, 16 requests in flight on 10 nodes made 0.81 reads a decision, and
0.93x the CPU a boot: see bench/README.md). A read that fails is not shared: each
request waiting on it reads for itself (and, the database being down, fails with its
own error).
"""

import threading


class SharedRead:
    """``read(context)`` run on behalf of every caller waiting for it, each answered by
    a read that began after it called. ``read`` must not call back into this one."""

    def __init__(self, read):
        self._read = read
        self._changed = threading.Condition()
        self._started = 0  # reads begun so far; the number of the one under way
        self._running = False
        self._done = 0  # the number of the last read that ended
        self._answer = None  # (value, succeeded) of read number self._done
        self._waiting = 0

    def __call__(self, context):
        """What a read that began after this call returns."""
        with self._changed:
            wanted = self._started + 1
            while True:
                if self._done >= wanted:
                    value, succeeded = self._answer
                    if succeeded:
                        return value
                    wanted = self._done + 1  # that read failed: any read after it
                elif not self._running:
                    break
                else:
                    self._wait()
            self._started += 1
            self._running, number = True, self._started
        try:
            value = self._read(context)
        except BaseException:
            self._end(number, None, succeeded=False)
            raise
        self._end(number, value, succeeded=True)
        return value

    def _wait(self):
        self._waiting += 1
        try:
            self._changed.wait()
        finally:
            self._waiting -= 1

    def waiting(self):
        """How many callers wait for a read now."""
        with self._changed:
            return self._waiting

    def reads(self):
        """How many reads have begun: fewer than the calls while callers shared them."""
        return self._started

    def _end(self, number, value, succeeded):
        with self._changed:
            self._running, self._done, self._answer = False, number, (value, succeeded)
            self._changed.notify_all()
