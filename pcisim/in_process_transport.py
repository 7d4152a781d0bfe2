"""kombu's in-memory transport as pcisim runs it: a consumer sleeps until a message
is put on one of its queues.

kombu's virtual transports poll: a consumer finding its queues empty sleeps
``polling_interval`` and reads them again. oslo.messaging sets that interval to 0
for ``memory://``, and every idle listener spun; with pcisim's former 1 ms floor,
the listeners and reply waiters of a ten-node control plane still used a quarter of
a CPU doing nothing, about 9 ms of CPU per boot in ``bench.scale``. Here putting a
message wakes the transports consuming that queue, and so does a connection told to
stop consuming; nothing else does.

Nor does a consumer wake when oslo.messaging's listeners ask it to. After each message
an RPC listener consumes with a timeout of 1 ms, doubled at each timeout up to 5 s, so
that it soon runs the acknowledgements that other threads queue for it; and the rabbit
driver cuts every wait on ``memory://`` into 50 ms slices. Over RabbitMQ that is a
handful of wake-ups per message; here it was ten consumer loops per message, a quarter
of a boot's CPU in ``bench.scale``. RPC listeners acknowledge in their own thread as
they receive (only notification listeners queue acknowledgements, and pcisim has none),
so nothing waits for those wake-ups: a consumer here waits at least ``IDLE_WAIT``.

Nor is each publish and consume wrapped in kombu's ``autoretry`` (see
``Connection.ensure``), nor each body encoded in base64 to be decoded at once: a
fifth of an in-process round trip's CPU.

Only pcisim's transports get this: other users of kombu's in-memory transport in the
process keep kombu's classes.
"""

import functools
import queue
import threading

from kombu.transport import memory as kombu_memory
from kombu.transport import virtual as kombu_virtual
from oslo_messaging._drivers import impl_rabbit

# Seconds a consumer waits, with no message put for it, before its drain times out;
# stopping a connection's consumption wakes it earlier.
IDLE_WAIT = 1.0


class _Consumers:
    """The transports consuming each in-memory queue of the process, woken when a
    message is put on it. Readers take no lock: each queue's entry is a tuple,
    replaced whole."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_queue = {}

    def add(self, queue_name, transport):
        with self._lock:
            self._by_queue[queue_name] = self._by_queue.get(queue_name, ()) + (transport,)

    def remove(self, queue_name, transport):
        with self._lock:
            rest = tuple(t for t in self._by_queue.get(queue_name, ()) if t is not transport)
            if rest:
                self._by_queue[queue_name] = rest
            else:
                self._by_queue.pop(queue_name, None)

    def wake(self, queue_name):
        for transport in self._by_queue.get(queue_name, ()):
            transport.arrival.set()


CONSUMERS = _Consumers()


class Channel(kombu_memory.Channel):
    """kombu's in-memory channel, announcing each message it puts to the queue's
    consumers, keeping bodies as they are (the JSON text of the message, not its base64
    form) and closed without walking the queues that every channel of the process
    shares.

    kombu's ``close`` walks that dictionary while another thread's channel may add or
    delete a queue: services stopping together failed with "dictionary changed size
    during iteration". The walk only asked each queue whether it was empty.
    """

    body_encoding = None

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        result = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        CONSUMERS.add(queue, self.connection)
        return result

    def basic_cancel(self, consumer_tag):
        queue_name = self._tag_to_queue.get(consumer_tag)
        super().basic_cancel(consumer_tag)
        if queue_name is not None:
            CONSUMERS.remove(queue_name, self.connection)

    def _put(self, queue, message, **kwargs):
        super()._put(queue, message, **kwargs)
        CONSUMERS.wake(queue)

    def _put_fanout(self, exchange, message, routing_key=None, **kwargs):
        for queue_name in self._lookup(exchange, routing_key):
            self._put(queue_name, message)

    def close(self):
        kombu_virtual.Channel.close(self)
        self.queues = {}


class Transport(kombu_memory.Transport):
    """kombu's in-memory transport whose ``drain_events`` waits for a message to be
    put on a queue it consumes instead of polling."""

    Channel = Channel

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        self.arrival = threading.Event()
        self.stopped = False

    def stop(self):
        """Wake a consumer waiting here and end every later wait at once: its
        connection's consumption has stopped, for good."""
        self.stopped = True
        self.arrival.set()

    def drain_events(self, connection, timeout=None):
        """Deliver one message from this transport's queues, waiting for one up to
        ``timeout`` seconds but at least ``IDLE_WAIT`` (None: for ever); raise
        ``TimeoutError`` (which is ``socket.timeout``, as kombu raises) when the wait
        ends, or is woken, with nothing delivered: a wake whose message another
        consumer took, or a stop, sends the caller back to its loop."""
        # NOTE: cleared before each read (and before ``stopped`` is read, which stop()
        # sets before it wakes), so that a message put or a stop made after a read
        # found nothing has set it again and the wait returns at once.
        self.arrival.clear()
        if self._deliver_one(timeout):
            return
        if self.stopped or not self._wait_for_arrival(timeout):
            raise TimeoutError()
        self.arrival.clear()
        if not self._deliver_one(timeout):
            raise TimeoutError()

    def _wait_for_arrival(self, timeout):
        return self.arrival.wait(None if timeout is None else max(timeout, IDLE_WAIT))

    def _deliver_one(self, timeout):
        try:
            self.cycle.get(self._deliver, timeout=timeout)
        except queue.Empty:
            return False
        return True


class Connection(impl_rabbit.Connection):
    """A rabbit-driver connection on pcisim's in-memory transport."""

    def ensure_connection(self):
        if self.connection.transport_cls is not Transport:
            # NOTE: the connection already made a transport of kombu's class to log its
            # address; closing the unopened connection drops it, and the next is ours.
            self.connection.close()
            self.connection.transport_cls = Transport
        super().ensure_connection()

    def ensure(self, method, **options):
        """Run ``method``, a publish or a consume, on this connection's channel.

        The rabbit driver runs each in kombu's ``autoretry``, which builds a class at
        every call to revive the channel after a connection error. A connection in
        memory loses none once its channel exists: the method runs as it is. Should it
        raise an error kombu recovers from (a channel closed under it), the driver's
        ``ensure`` runs it again and recovers as it always does; any other error goes
        through the driver's ``ensure`` too, raised there, so that callers see the
        errors they always saw (``MessageDeliveryFailure``, say).
        """
        if self.channel is None:
            super().ensure(method, **options)
            return
        try:
            method()
        except (
            self.connection.recoverable_connection_errors
            + self.connection.recoverable_channel_errors
        ):
            super().ensure(method, **options)
        except Exception as error:
            super().ensure(functools.partial(_raise, error), **options)

    def stop_consuming(self):
        super().stop_consuming()
        transport = self.connection.transport
        if isinstance(transport, Transport):
            transport.stop()


def _raise(error):
    raise error


def install(rpc_transport):
    """Make every connection of the oslo.messaging transport ``rpc_transport`` (one on
    ``kombu+memory:////``) a connection on pcisim's in-memory transport."""
    # NOTE: every connection of a driver, for sending or listening, comes from its
    # pool's connection_cls.
    rpc_transport._driver._connection_pool.connection_cls = Connection
