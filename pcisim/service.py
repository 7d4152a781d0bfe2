"""Long-running pcisim services: oslo.service Services that serve RPC topics.

Services run in the process that starts them (oslo.service's in-process ``Launcher``),
one process per binary, and stop gracefully on SIGTERM and on SIGINT (Ctrl-C).
"""

import gc
import signal
import threading

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_service import service, systemd

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import exception, lifecycle, rpc, trace

LOG = logging.getLogger(__name__)


class RPCService(lifecycle.Lifecycle, service.Service):
    """Serves ``endpoints`` on ``topic`` (and on ``topic.server`` when given).

    The transport is created in ``start`` rather than in the constructor, so that a
    launcher that forks a worker process connects from the worker. ``actor`` is the
    name callers address it by (its topic, or its server for a compute), which its
    threads send under (``pcisim.trace``).
    """

    def __init__(self, binary, topic, endpoints, server=None, transport_url=None, actor=None):
        super().__init__()
        self._serving = threading.Lock()  # between a start's last step and a stop
        self.binary = binary
        self.topic = topic
        self.actor = actor or topic
        self.endpoints = endpoints
        self.server_name = server or pcisim_conf.CONF.host
        self.transport_url = transport_url or pcisim_conf.CONF.transport_url
        self.transport = None
        self.rpcserver = None

    def start(self):
        """Wait for the broker, ``prepare``, then take messages; ``stop`` ends any of
        these waits. The outcome is announced (``Lifecycle``): ready, or the failure,
        which is raised again."""
        super().start()
        self.transport = rpc.get_transport(url=self.transport_url)
        try:
            rpc.wait_for_broker(self.transport_url, self.stopping, self.binary)
            with trace.acting_as(self.actor):
                self.prepare()
            self._serve()
        except exception.ServiceStopping as stopped:
            LOG.info("%s", stopped)
            self.transport.cleanup()
            return
        except Exception as error:
            self.transport.cleanup()
            self.announce_failure(error)
            raise
        LOG.info(
            "%s listening on topic %r as server %r over %s",
            self.binary,
            self.topic,
            self.server_name,
            rpc.safe_url(self.transport_url),
        )
        self.announce_ready()

    def _serve(self):
        """Start the RPC server, unless ``stop`` came first (then undo it)."""
        target = messaging.Target(topic=self.topic, server=self.server_name)
        server = rpc.get_server(self.transport, target, self.endpoints, self.actor)
        server.start()
        with self._serving:
            if not self.stopping.is_set():
                self.rpcserver = server
                return
        server.stop()
        server.wait()
        raise exception.ServiceStopping(binary=self.binary, awaited="its RPC server to start")

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
        """Stop taking messages and wait for the calls in progress. A start still
        waiting (for the broker, the conductor) ends at once, and cleans up itself."""
        self.stopping.set()
        with self._serving:
            server, self.rpcserver = self.rpcserver, None
        if server is not None:
            server.stop()
            server.wait()
            self.transport.cleanup()
            LOG.info("%s stopped serving topic %r", self.binary, self.topic)
        super().stop(graceful)


def serve(services, conf=pcisim_conf.CONF, reload=None, started=None):
    """Run ``services`` in this process until SIGTERM or SIGINT, then stop them gracefully.

    They start in their order, each once the one before is ready, and stop in the
    reverse order: stopping a service stops its RPC server from taking new messages
    and waits for the calls in progress to finish. With
    ``reload``, SIGHUP calls it (a failure is logged and the services keep running).
    Once every service is ready (``Lifecycle``), ``started`` is called and a supervisor
    is told (systemd's ``READY=1`` on ``$NOTIFY_SOCKET``). Returns the number of the
    signal that stopped them; exits with status 1 when a service fails to start.
    """
    wake = threading.Event()
    received = []

    def on_signal(signum, frame):
        received.append(signum)
        wake.set()

    handled = [signal.SIGTERM, signal.SIGINT] + ([signal.SIGHUP] if reload else [])
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    for svc in services:
        if isinstance(svc, lifecycle.Lifecycle):
            svc.watch(wake.set)
    launcher = service.Launcher(conf)
    try:
        stopped_by = _supervise(launcher, services, wake, received, reload, started)
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
    if stopped_by is None:
        raise SystemExit(1)
    return stopped_by


def _supervise(launcher, services, wake, received, reload, started):
    """Launch the services, each once the one before is ready (the conductor before
    the computes that wait for it), and wait for signals: the signal that ends the
    run, or None when a service failed to start."""
    announced = False
    launched = 0
    while True:
        failed = [svc for svc in services if getattr(svc, "failure", None) is not None]
        if failed:
            LOG.error("%s could not start (%s); stopping", _name(failed[0]), failed[0].failure)
            return None
        while received and received[0] == signal.SIGHUP:
            received.pop(0)
            _reload(reload)
        if received:
            LOG.info("Caught %s, stopping gracefully", signal.Signals(received[0]).name)
            return received[0]
        while launched < len(services) and (launched == 0 or _ready(services[launched - 1])):
            launcher.launch_service(services[launched])
            launched += 1
        if not announced and launched == len(services) and all(map(_ready, services)):
            announced = True
            _announce_ready(services, started)
        wake.wait()
        wake.clear()


def _ready(svc):
    return not isinstance(svc, lifecycle.Lifecycle) or svc.ready.is_set()


def _name(svc):
    return getattr(svc, "binary", type(svc).__name__)


def _announce_ready(services, started):
    LOG.info("Ready: %s", ", ".join(_name(svc) for svc in services))
    freeze_startup_heap()
    if started is not None:
        started()
    systemd.notify_once()


def freeze_startup_heap():
    """Collect start-up's garbage, then keep what is left (modules, classes, the
    trackers' devices: nearly all of a started process's objects) out of every later
    collection. Each full collection otherwise walked all of it again while it served
    requests: about 85 ms a time in ``bench.scale``, 5% of the CPU of a boot."""
    gc.collect()
    gc.freeze()


def _reload(reload):
    LOG.info("Caught SIGHUP, reloading")
    try:
        reload()
    except Exception:
        LOG.exception("Reload failed; running on as before")
