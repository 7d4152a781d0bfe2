"""Run pieces of the control plane inside a test process, over a real transport.

``InProcessConductor`` starts a conductor serving a topic of its own on the given
transport (``kombu+memory:////`` by default: real serialization, in process). Inside
``acting_as_compute()`` the calling process behaves as a compute: database access is
forbidden outside the conductor's threads, and remotable object calls travel to the
conductor over RPC. ``calls`` counts what the conductor received::

    with InProcessConductor() as conductor:   # started, and acting as a compute
        device.save()
        assert conductor.calls[("object_action", "PciDevice", "save")] == 1

The database must be configured already (``db.engine.configure`` or a patched
factory), and ``pcisim.conf.register_opts`` called.
"""

import contextlib
import uuid

from conductor import manager, rpcapi
from objects import base as objects_base
from pcisim import conf as pcisim_conf
from pcisim import dbaccess, rpc
from pcisim.service import RPCService

CONF = pcisim_conf.CONF


class InProcessConductor:
    """A conductor in this process, serving a topic of its own."""

    def __init__(self, transport_url=pcisim_conf.IN_PROCESS_TRANSPORT_URL):
        self.transport_url = transport_url
        self.topic = f"conductor-{uuid.uuid4().hex[:12]}"
        self.manager = manager.ConductorManager()
        self.service = RPCService(
            "pcisim-conductor", self.topic, [self.manager], transport_url=transport_url
        )
        self.client_transport = None
        self._acting = contextlib.ExitStack()

    @property
    def calls(self):
        return self.manager.calls

    def start(self):
        self.service.start()
        self.client_transport = rpc.get_transport(url=self.transport_url)
        return self

    def stop(self):
        """Stop serving (again, harmlessly, if a test stopped the service already)."""
        self.service.stop()
        self.client_transport.cleanup()

    @contextlib.contextmanager
    def acting_as_compute(self, binary="test-compute"):
        """While the block runs, this process is a compute talking to this conductor."""
        CONF.set_override("topic", self.topic, group="conductor")
        objects_base.set_indirection_api(rpcapi.ConductorAPI(self.client_transport))
        dbaccess.forbid(binary)
        try:
            yield self
        finally:
            dbaccess.allow()
            objects_base.set_indirection_api(None)
            CONF.clear_override("topic", group="conductor")

    def __enter__(self):
        self.start()
        return self._acting.enter_context(self.acting_as_compute())

    def __exit__(self, *exc_info):
        self._acting.close()
        self.stop()
