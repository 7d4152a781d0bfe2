"""Passwords masked in URLs and in messages about them (``pcisim.rpc.safe_url``, ``masked``)."""

import pytest

from pcisim import rpc

# (URL, as it may be shown)
URLS = [
    ("rabbit://guest:s3cr3t@127.0.0.1:5672/", "rabbit://guest:***@127.0.0.1:5672/"),
    ("rabbit://u:p1@h1:5672,v:p2@h2:5672/vh", "rabbit://u:***@h1:5672,v:***@h2:5672/vh"),
    ("mysql+pymysql://root:p@ss@db/x", "mysql+pymysql://root:***@db/x"),
    ("mysql+pymysql://root:pa/ss@db/x", "mysql+pymysql://root:***@db/x"),
    (
        "postgresql://u:a,b@db:5432/x?sslmode=require",
        "postgresql://u:***@db:5432/x?sslmode=require",
    ),
    ("rabbit://:s3cr3t@h/", "rabbit://:***@h/"),
    ("mysql+pymysql://root@db/x", "mysql+pymysql://root@db/x"),
    ("sqlite:////var/lib/pcisim/pcisim.sqlite", "sqlite:////var/lib/pcisim/pcisim.sqlite"),
    ("kombu+memory:////", "kombu+memory:////"),
]


@pytest.mark.parametrize(("url", "shown"), URLS)
def test_a_url_is_shown_without_its_password(url, shown):
    assert rpc.safe_url(url) == shown


def test_every_url_of_a_message_is_masked():
    message = "no broker at rabbit://u:p1@h1/ nor at rabbit://v:p2@h2/"

    assert rpc.safe_url(message) == "no broker at rabbit://u:***@h1/ nor at rabbit://v:***@h2/"


def test_a_password_quoted_alone_by_a_parser_is_masked_too():
    url = "postgresql://u:s%40cr%2Ft@db:port/x"
    message = "invalid literal for int() with base 10: 'port' in s%40cr%2Ft or s@cr/t"

    assert "cr" not in rpc.masked(message, url)
