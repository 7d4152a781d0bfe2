"""Channels of the in-process transport close safely beside other threads' channels."""

import queue

from kombu.transport import memory

from pcisim import conf as pcisim_conf
from pcisim import rpc


class _QueueAddedMeanwhile(queue.Queue):
    """A queue whose emptiness check adds another queue, as another thread's channel
    declaring one at that moment would."""

    def empty(self):
        memory.Channel.queues["added-meanwhile"] = queue.Queue()
        return super().empty()


def test_closing_a_channel_never_walks_the_queues_other_channels_share():
    transport = rpc.get_transport(url=pcisim_conf.IN_PROCESS_TRANSPORT_URL)
    connection = transport._driver._connection_pool.create()
    memory.Channel.queues["checked"] = _QueueAddedMeanwhile()
    try:
        connection.close()  # kombu's own close: "dictionary changed size during iteration"
    finally:
        memory.Channel.queues.pop("checked", None)
        memory.Channel.queues.pop("added-meanwhile", None)
        transport.cleanup()

    assert "added-meanwhile" not in memory.Channel.queues
