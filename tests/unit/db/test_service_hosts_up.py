"""``service_hosts_up``: the hosts the scheduler may choose, by their services' records."""

import datetime

from oslo_utils import timeutils

from pcisim.compute import BINARY
from pcisim.db import api

NOW = timeutils.utcnow()
A_MINUTE = datetime.timedelta(seconds=60)


def _service(ctxt, host, binary=BINARY, seen=NOW, **values):
    return api.service_create(
        ctxt, {"host": host, "binary": binary, "last_seen_up": seen, **values}
    )


def _up(ctxt):
    return api.service_hosts_up(ctxt, BINARY, NOW - A_MINUTE)


def test_a_service_seen_within_the_window_is_up(db, ctxt):
    _service(ctxt, "seen", seen=NOW - A_MINUTE / 2)
    assert _up(ctxt) == {"seen"}


def test_a_service_last_seen_before_the_window_is_down(db, ctxt):
    _service(ctxt, "stale", seen=NOW - 2 * A_MINUTE)
    assert _up(ctxt) == set()


def test_a_service_never_seen_is_down(db, ctxt):
    _service(ctxt, "new", seen=None)
    assert _up(ctxt) == set()


def test_a_forced_down_service_is_down_however_recently_seen(db, ctxt):
    _service(ctxt, "forced", forced_down=True)
    assert _up(ctxt) == set()


def test_only_the_binary_asked_for_counts(db, ctxt):
    _service(ctxt, "api-host", binary="pcisim-api")
    assert _up(ctxt) == set()
