"""Serving the HTTP API: waitress, a production WSGI server, as an oslo.service Service."""

import ipaddress
import socket
import threading

import waitress
from oslo_log import log as logging
from oslo_service import service
from waitress import wasyncore

from pcisim import exception, lifecycle

LOG = logging.getLogger(__name__)


def check_listen(host, auth_token):
    """Refuse to serve where other machines can reach the API without a token.

    Raises ``ApiAuthTokenRequired`` naming ``host`` when, without ``auth_token``, it
    resolves to any address that is not a loopback one (``0.0.0.0``, ``::``, a LAN
    address), and ``InvalidConfigValue`` when it does not resolve.
    """
    if auth_token:
        return
    if not all(_is_loopback(address) for address in _addresses(host)):
        raise exception.ApiAuthTokenRequired(address=host)


def _addresses(host):
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as error:
        reason = f"{host} does not resolve: {getattr(error, 'strerror', None) or error}"
        raise exception.InvalidConfigValue(option="[api] listen", reason=reason) from None
    return {info[4][0] for info in infos}


def _is_loopback(address):
    ip = ipaddress.ip_address(address.partition("%")[0])  # NOTE: an IPv6 scope, fe80::1%eth0
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


class WSGIService(lifecycle.Lifecycle, service.Service):
    """Serves ``app`` on ``host``:``port`` (0 picks a free port) until stopped.

    Only the serving thread touches the server's sockets: ``stop`` asks it to stop
    and wakes it through waitress's trigger, and the thread closes every socket once
    out of ``select()``. Closing them from another thread could pull a file
    descriptor from under its ``select()`` (``EBADF``).
    """

    binary = "pcisim-api"

    def __init__(self, app, host="127.0.0.1", port=0, threads=8):
        """Bind ``host``:``port`` now; ``OSError`` naming them if that is impossible."""
        super().__init__()
        self._map = {}
        try:
            self.server = waitress.create_server(
                app, map=self._map, host=host, port=port, threads=threads
            )
        except OSError as error:
            message = f"cannot listen on {host}:{port}: {error.strerror or error}"
            raise OSError(error.errno, message) from None
        self._thread = None
        # NOTE: held to pull the trigger and to close it, so it is never pulled closed.
        self._trigger_lock = threading.Lock()
        self._closed = False

    @property
    def url(self):
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self):
        super().start()
        self._thread = threading.Thread(target=self._serve, name="pcisim-api", daemon=True)
        self._thread.start()
        LOG.info("pcisim API listening on %s", self.url)
        self.announce_ready()

    def _serve(self):
        adj = self.server.adj
        try:
            while self._map and not self.stopping.is_set():
                wasyncore.loop(
                    timeout=adj.asyncore_loop_timeout,
                    map=self._map,
                    use_poll=adj.asyncore_use_poll,
                    count=1,
                )
        finally:
            self._close()

    def _close(self):
        """Finish the requests in progress, then close every socket (listening,
        connections, trigger)."""
        self.server.task_dispatcher.shutdown()
        with self._trigger_lock:
            wasyncore.close_all(self._map)
            self._closed = True

    def _wake(self):
        with self._trigger_lock:
            if not self._closed:
                self.server.pull_trigger()

    def stop(self, graceful=False):
        """Stop serving and close every connection; a second call does nothing."""
        self.stopping.set()
        if self._thread is None:
            self._close()
        else:
            self._wake()
            self._thread.join(timeout=10)
        super().stop(graceful)
