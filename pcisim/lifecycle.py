"""What a running service tells the process that launched it: ready, or failed.

oslo.service's in-process launcher starts each service in a thread of its own and only
logs an exception from ``start``, so a process whose service never started would live
on without serving. A service that is a ``Lifecycle`` announces the outcome of its
start instead; ``pcisim.service.serve`` watches it, tells a supervisor (systemd's
``READY=1``) once every service is ready, and exits non-zero when one fails.
"""

import threading


class Lifecycle:
    """Readiness of one service: ``ready`` once it takes requests, ``failure`` the error
    that ended its start, ``stopping`` once it was asked to stop (its waits end)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # NOTE: a mixin before the oslo.service class
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.failure = None
        self._watchers = []

    def watch(self, callback):
        """Call ``callback()`` (from the service's thread) when it is ready or failed."""
        self._watchers.append(callback)

    def announce_ready(self):
        self.ready.set()
        self._changed()

    def announce_failure(self, error):
        self.failure = error
        self._changed()

    def _changed(self):
        for callback in self._watchers:
            callback()
