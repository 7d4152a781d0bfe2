"""A long-running pcisim service: an oslo.service Service that serves one RPC topic."""

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_service import service

from pcisim import conf as pcisim_conf
from pcisim import rpc

LOG = logging.getLogger(__name__)


class RPCService(service.Service):
    """Serves ``endpoints`` on ``topic`` (and on ``topic.server`` when given).

    The transport is created in ``start`` rather than in the constructor, so that a
    launcher that forks a worker process connects from the worker.
    """

    def __init__(self, binary, topic, endpoints, server=None, transport_url=None):
        super().__init__()
        self.binary = binary
        self.topic = topic
        self.endpoints = endpoints
        self.server_name = server or pcisim_conf.CONF.host
        self.transport_url = transport_url or pcisim_conf.CONF.transport_url
        self.transport = None
        self.rpcserver = None

    def start(self):
        super().start()
        self.transport = rpc.get_transport(url=self.transport_url)
        target = messaging.Target(topic=self.topic, server=self.server_name)
        self.rpcserver = rpc.get_server(self.transport, target, self.endpoints)
        self.rpcserver.start()
        LOG.info(
            "%s listening on topic %r as server %r over %s",
            self.binary,
            self.topic,
            self.server_name,
            rpc.safe_url(self.transport_url),
        )

    def stop(self, graceful=False):
        if self.rpcserver is not None:
            self.rpcserver.stop()
            self.rpcserver.wait()
            self.rpcserver = None
            self.transport.cleanup()
            LOG.info("%s stopped serving topic %r", self.binary, self.topic)
        super().stop(graceful)
