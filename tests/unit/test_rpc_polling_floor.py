"""The in-process transport polls with a floor, on pcisim's transports only (issue 12)."""

import kombu

from pcisim import conf as pcisim_conf
from pcisim import rpc


def test_connections_of_an_in_process_transport_never_poll_in_a_busy_loop(config):
    transport = rpc.get_transport(url=pcisim_conf.IN_PROCESS_TRANSPORT_URL)
    try:
        connection = transport._driver._connection_pool.create()
        try:
            assert connection.connection.transport.polling_interval == (rpc.IN_PROCESS_POLL_SECONDS)
        finally:
            connection.close()
    finally:
        transport.cleanup()


def test_other_users_of_kombus_memory_transport_keep_their_polling_interval():
    with kombu.Connection("memory://") as connection:
        connection.transport.polling_interval = 0.0
        assert connection.transport.polling_interval == 0.0
