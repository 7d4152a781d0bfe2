"""pcisim's RPC set-up."""

import kombu

from pcisim import rpc


def test_the_in_process_transport_never_polls_in_a_busy_loop():
    with kombu.Connection("memory://") as connection:
        connection.transport.polling_interval = 0.0  # what oslo.messaging sets
        assert connection.transport.polling_interval == rpc.IN_PROCESS_POLL_SECONDS


def test_a_longer_polling_interval_is_kept():
    with kombu.Connection("memory://") as connection:
        connection.transport.polling_interval = 0.5
        assert connection.transport.polling_interval == 0.5


def test_passwords_are_masked_in_logged_urls():
    assert rpc.safe_url("rabbit://u:secret@h1:5672,v:other@h2/vh") == (
        "rabbit://u:***@h1:5672,v:***@h2/vh"
    )
