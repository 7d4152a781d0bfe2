"""pcisim's RPC set-up."""

from pcisim import rpc


def test_passwords_are_masked_in_logged_urls():
    assert rpc.safe_url("rabbit://u:secret@h1:5672,v:other@h2/vh") == (
        "rabbit://u:***@h1:5672,v:***@h2/vh"
    )
