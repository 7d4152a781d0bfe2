"""The compute service: serves a host's compute topic, reports in, runs the periodic."""

from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import exception
from pcisim.compute import BINARY
from pcisim.compute import manager as compute_manager
from pcisim.conductor import rpcapi as conductor_rpcapi
from pcisim.objects.service import Service
from pcisim.service import RPCService

LOG = logging.getLogger(__name__)
CONF = pcisim_conf.CONF
# Short, so that a SIGTERM ends the wait for a missing conductor within seconds.
CONDUCTOR_PING_TIMEOUT = 5


class ComputeService(RPCService):
    """One compute host: its nodes come from ``driver``.

    Before taking any message it registers (or finds) its service record, syncs its
    nodes and finishes deletes a crash interrupted (``ComputeManager.init_host``).
    """

    def __init__(self, host, driver, device_specs, transport_url=None):
        self.manager = compute_manager.ComputeManager(host, driver, device_specs, None)
        super().__init__(
            BINARY,
            CONF.compute.topic,
            [self.manager],
            server=host,
            transport_url=transport_url,
            actor=host,
        )
        self.host = host
        self.record = None

    def prepare(self):
        context = pcisim_context.get_admin_context()
        self._wait_for_conductor(context)
        self.manager.compute_task_api = conductor_rpcapi.ComputeTaskAPI(self.transport)
        self.record = Service.register(context, self.host, BINARY, self.topic)
        self.report_state()
        self.manager.init_host(context)
        self.add_timer(CONF.report_interval, self.report_state)
        self.add_timer(CONF.compute.update_resources_interval, self.periodic_update)

    def _wait_for_conductor(self, context):
        """Return once the conductor answers; ``ServiceStopping`` when stopped first.

        NOTE: a compute started before its conductor would otherwise time out in its
        first object call and never serve; as Nova's compute does, it waits instead.
        """
        conductor = conductor_rpcapi.ConductorAPI(self.transport)
        while not conductor.ping(context, CONDUCTOR_PING_TIMEOUT):
            LOG.warning(
                "%s on %s waits for the conductor on topic %r: no answer within %s s. "
                "Is it running? Trying again",
                BINARY,
                self.host,
                CONF.conductor.topic,
                CONDUCTOR_PING_TIMEOUT,
            )
            if self.stopping.is_set():
                raise exception.ServiceStopping(binary=BINARY, awaited="the conductor")

    def report_state(self):
        """Heartbeat, each in a context (and a traced flow) of its own; a failed one is
        logged and the next one tried."""
        try:
            with self.record.obj_alternate_context(pcisim_context.get_admin_context()):
                self.record.heartbeat()
        except Exception:
            LOG.exception("%s on %s could not report its state", BINARY, self.host)

    def periodic_update(self):
        """The periodic resource update of every node; never raises."""
        try:
            self.manager.update_available_resource(pcisim_context.get_admin_context())
        except Exception:
            LOG.exception("Periodic update of %s failed", self.host)
