"""Long-running pcisim services: oslo.service Services that serve RPC topics.

Services run in the process that starts them (oslo.service's in-process ``Launcher``),
one process per binary, and stop gracefully on SIGTERM and on SIGINT (Ctrl-C).
"""

import signal
import threading

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_service import service

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import rpc, trace

LOG = logging.getLogger(__name__)


class RPCService(service.Service):
    """Serves ``endpoints`` on ``topic`` (and on ``topic.server`` when given).

    The transport is created in ``start`` rather than in the constructor, so that a
    launcher that forks a worker process connects from the worker. ``actor`` is the
    name callers address it by (its topic, or its server for a compute), which its
    threads send under (``pcisim.trace``).
    """

    def __init__(self, binary, topic, endpoints, server=None, transport_url=None, actor=None):
        super().__init__()
        self.binary = binary
        self.topic = topic
        self.actor = actor or topic
        self.endpoints = endpoints
        self.server_name = server or pcisim_conf.CONF.host
        self.transport_url = transport_url or pcisim_conf.CONF.transport_url
        self.transport = None
        self.rpcserver = None

    def start(self):
        super().start()
        self.transport = rpc.get_transport(url=self.transport_url)
        with trace.acting_as(self.actor):
            self.prepare()
        target = messaging.Target(topic=self.topic, server=self.server_name)
        self.rpcserver = rpc.get_server(self.transport, target, self.endpoints, self.actor)
        self.rpcserver.start()
        LOG.info(
            "%s listening on topic %r as server %r over %s",
            self.binary,
            self.topic,
            self.server_name,
            rpc.safe_url(self.transport_url),
        )

    def prepare(self):
        """Get ready to serve, with ``self.transport`` set; no message is taken yet."""

    def add_timer(self, interval, callback):
        """Call ``callback`` every ``interval`` seconds, first after one interval, in a
        thread acting for this service; the contexts a tick makes current (see
        ``context.get_admin_context``) are gone after it."""

        def tick():
            with trace.acting_as(self.actor), pcisim_context.restoring_current():
                callback()

        self.tg.add_timer(interval, tick, initial_delay=interval)

    def stop(self, graceful=False):
        if self.rpcserver is not None:
            self.rpcserver.stop()
            self.rpcserver.wait()
            self.rpcserver = None
            self.transport.cleanup()
            LOG.info("%s stopped serving topic %r", self.binary, self.topic)
        super().stop(graceful)


def serve(services, conf=pcisim_conf.CONF, reload=None, started=None):
    """Run ``services`` in this process until SIGTERM or SIGINT, then stop them gracefully.

    They stop in the reverse of their order: stopping a service stops its RPC server
    from taking new messages and waits for the calls in progress to finish. With
    ``reload``, SIGHUP calls it (a failure is logged and the services keep running).
    ``started`` is called once they are launched. Returns the number of the signal
    that stopped them.
    """
    wake = threading.Event()
    received = []

    def on_signal(signum, frame):
        received.append(signum)
        wake.set()

    handled = [signal.SIGTERM, signal.SIGINT] + ([signal.SIGHUP] if reload else [])
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    launcher = service.Launcher(conf)
    try:
        for svc in services:
            launcher.launch_service(svc)
        if started is not None:
            started()
        while _wait_for_signal(wake, received) == signal.SIGHUP:
            _reload(reload)
        LOG.info("Caught %s, stopping gracefully", signal.Signals(received[-1]).name)
    finally:
        # Dependents first (the API, then the computes) and the conductor last, as they
        # are given: a compute outliving its conductor would wait out an RPC timeout
        # on any call in flight. The launcher then finds them stopped.
        for svc in reversed(services):
            svc.stop()
        launcher.stop()
        launcher.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return received[-1]


def _wait_for_signal(wake, received):
    wake.wait()
    wake.clear()
    return received[-1]


def _reload(reload):
    LOG.info("Caught SIGHUP, reloading")
    try:
        reload()
    except Exception:
        LOG.exception("Reload failed; running on as before")
