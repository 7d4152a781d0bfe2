"""oslo.messaging set up for pcisim: transports, serializer, clients and servers.

Exceptions from ``pcisim.exception`` (and oslo.versionedobjects') are allowed to
cross the wire, so a ``PciDeviceNotFound`` raised by the conductor is raised again, as
itself, in the compute that called it. Any other remote exception arrives as
``oslo_messaging.RemoteError``.
"""

import re
import socket
from urllib import parse

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_messaging.rpc import dispatcher

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import exception, in_process_transport, trace
from pcisim.objects import base as objects_base

LOG = logging.getLogger(__name__)
ALLOWED_EXMODS = ["pcisim.exception", "oslo_versionedobjects.exception"]
# user:password@ after the scheme or after a comma (a URL may list several hosts). The
# password runs to the last "@" before the host, so that one holding "@", "/" or ","
# unescaped is masked whole; text that only looks like credentials is masked too.
_CREDENTIALS = re.compile(r"(://|,)([^:/@,\s]*):(.*?)@(?=[^@/,\s]*(?:[/,?\s]|$))")


def get_transport(conf=pcisim_conf.CONF, url=None):
    """The RPC transport at ``url`` (default ``[DEFAULT] transport_url``)."""
    if (url or conf.transport_url).startswith(pcisim_conf.IN_PROCESS_TRANSPORT_URL):
        # NOTE: kombu's in-process transport has no heartbeats; asking for them only
        # logs a warning for every connection (a process on it talks to no broker).
        conf.set_default("heartbeat_timeout_threshold", 0, group="oslo_messaging_rabbit")
        transport = _get_rpc_transport(conf, url)
        in_process_transport.install(transport)
        return transport
    return _get_rpc_transport(conf, url)


def _get_rpc_transport(conf, url):
    return messaging.get_rpc_transport(conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)


BROKER_PROBE_TIMEOUT = 2.0
AMQP_PORT = 5672


def broker_addresses(url, conf=pcisim_conf.CONF):
    """The (host, port) of each RabbitMQ broker that ``url`` names; none for the
    in-process transport, which has no broker to wait for."""
    parsed = messaging.TransportURL.parse(conf, url)
    if parsed.transport != "rabbit":
        return []
    return [(host.hostname, host.port or AMQP_PORT) for host in parsed.hosts]


def _refusal(address):
    """Why the broker at ``address`` accepts no connection, or None when it does."""
    try:
        socket.create_connection(address, timeout=BROKER_PROBE_TIMEOUT).close()
    except OSError as error:
        return error.strerror or str(error)
    return None


def wait_for_broker(url, stopping, waiter, conf=pcisim_conf.CONF):
    """Return once a broker of ``url`` accepts connections; raise ``ServiceStopping``
    as soon as the event ``stopping`` is set while it does not.

    NOTE: oslo.messaging's rabbit driver retries connecting forever, and nothing
    interrupts it: a server started against a broker that is away could not be stopped
    until the broker came back. Entering it only once the broker answers makes that
    wait one a SIGTERM ends.
    """
    addresses = broker_addresses(url, conf)
    interval = conf.oslo_messaging_rabbit.rabbit_retry_interval
    waited = False
    while addresses and all(refusals := [_refusal(address) for address in addresses]):
        if not waited:
            LOG.warning(
                "%s waits for the message broker at %s, which accepts no connection (%s); "
                "trying again every %s s",
                waiter,
                safe_url(url),
                "; ".join(refusals),
                interval,
            )
            waited = True
        if stopping.wait(interval):
            raise exception.ServiceStopping(binary=waiter, awaited="the message broker")
    if waited:
        LOG.info("%s: the message broker at %s accepts connections", waiter, safe_url(url))


def answer_pings(conf=pcisim_conf.CONF):
    """Make the RPC servers this process starts answer oslo.messaging's ping
    (``oslo_rpc_server_ping``, ``rpc_ping_enabled``) in the server itself."""
    # NOTE: oslo.messaging registers the option when it makes its first RPC server, and
    # reads it from the global configuration.
    conf.register_opts(dispatcher._dispatcher_opts)
    conf.set_default("rpc_ping_enabled", True)


def safe_url(url):
    """``url`` (or any text holding URLs) with every password replaced by ``***``, for
    logs and messages."""
    return _CREDENTIALS.sub(r"\1\2:***@", url)


def masked(text, *urls):
    """``text``, such as a library's error message about ``urls``, with no password of
    theirs left in it: in URL form, or alone (as a parser may quote a bad part)."""
    text = safe_url(str(text))
    for url in urls:
        for match in _CREDENTIALS.finditer(url or ""):
            for password in {match.group(3), parse.unquote(match.group(3))} - {""}:
                text = text.replace(password, "***")
    return text


class RequestContextSerializer(messaging.Serializer):
    """Carries the request context, and serializes objects within the payload.

    On a server given an ``actor``, rebuilding the context of a message is also where
    the dispatching thread learns whom it acts for, which ``pcisim.trace`` records as
    the sender of whatever the handler sends on.
    """

    def __init__(self, base=None, actor=None):
        self._base = base or objects_base.PcisimObjectSerializer()
        self._actor = actor

    def serialize_entity(self, context, entity):
        return self._base.serialize_entity(context, entity)

    def deserialize_entity(self, context, entity):
        return self._base.deserialize_entity(context, entity)

    def serialize_context(self, context):
        return context.to_dict()

    def deserialize_context(self, context):
        if self._actor is not None:
            trace.set_actor(self._actor)
        # NOTE: oslo.messaging dispatches on the thread that rebuilds the context, so
        # made current here, the handler's log lines carry the caller's request id.
        return pcisim_context.RequestContext.from_dict(context, overwrite=True)


def get_client(transport, target, version_cap=None):
    """An RPC client for ``target``; its messages are recorded while tracing is on."""
    return trace.TracingClient(
        messaging.get_rpc_client(
            transport, target, version_cap=version_cap, serializer=RequestContextSerializer()
        )
    )


def get_server(transport, target, endpoints, actor=None):
    """An RPC server of ``endpoints``; its handlers act for ``actor`` (see trace)."""
    return messaging.get_rpc_server(
        transport,
        target,
        endpoints,
        serializer=RequestContextSerializer(actor=actor),
        access_policy=dispatcher.DefaultRPCAccessPolicy,
    )
