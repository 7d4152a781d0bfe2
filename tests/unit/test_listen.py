"""Where the HTTP API may listen without [api] auth_token: loopback addresses only."""

import pytest

from pcisim import exception, wsgi

LOOPBACK = ["127.0.0.1", "127.1.2.3", "::1", "localhost", "::ffff:127.0.0.1"]
NOT_LOOPBACK = ["0.0.0.0", "::", "192.0.2.10", "10.0.0.1", "fe80::1%lo", "::ffff:192.0.2.10"]


@pytest.mark.parametrize("listen", LOOPBACK)
def test_a_loopback_address_needs_no_token(listen):
    wsgi.check_listen(listen, auth_token=None)


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
def test_any_other_address_is_refused_without_a_token_naming_it(listen):
    with pytest.raises(exception.ApiAuthTokenRequired) as raised:
        wsgi.check_listen(listen, auth_token=None)

    assert f"listen on {listen}," in raised.value.message
    assert "[api] auth_token" in raised.value.message


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
def test_with_a_token_every_address_is_allowed(listen):
    wsgi.check_listen(listen, auth_token="t0ken")


def test_an_empty_token_is_no_token():
    with pytest.raises(exception.ApiAuthTokenRequired):
        wsgi.check_listen("0.0.0.0", auth_token="")


def test_a_name_that_does_not_resolve_is_named():
    with pytest.raises(exception.InvalidConfigValue, match=r"\[api\] listen: nosuch.invalid"):
        wsgi.check_listen("nosuch.invalid", auth_token=None)
