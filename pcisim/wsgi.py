"""Serving the HTTP API: waitress, a production WSGI server, as an oslo.service Service."""

import threading

import waitress
from oslo_log import log as logging
from oslo_service import service

LOG = logging.getLogger(__name__)


class WSGIService(service.Service):
    """Serves ``app`` on ``host``:``port`` (0 picks a free port) until stopped."""

    def __init__(self, app, host="127.0.0.1", port=0, threads=8):
        super().__init__()
        self.server = waitress.create_server(app, host=host, port=port, threads=threads)
        self._thread = None

    @property
    def url(self):
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self):
        super().start()
        self._thread = threading.Thread(target=self.server.run, name="pcisim-api", daemon=True)
        self._thread.start()
        LOG.info("pcisim API listening on %s", self.url)

    def stop(self, graceful=False):
        self.server.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().stop(graceful)
