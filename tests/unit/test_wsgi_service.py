"""The API's WSGI service stops cleanly from another thread, whatever its loop is doing."""

import select
import socket
import threading
import time
import urllib.request

import pytest
from waitress import wasyncore

from pcisim import wsgi


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that escaped any thread during the test."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    return errors


class SelectHeldUntilClosed:
    """``select`` for waitress's loop that, once armed, holds the loop between reading
    its sockets and selecting on them until the listening socket is closed (or half a
    second passes): the window in which closing it from another thread broke select()."""

    def __init__(self, service):
        self.service, self.armed = service, threading.Event()
        self.listening = service.server.socket

    def select(self, *args):
        if self.armed.is_set():
            self.armed.clear()
            deadline = time.monotonic() + 0.5
            while self.listening.fileno() != -1 and time.monotonic() < deadline:
                time.sleep(0.005)
        return select.select(*args)


def test_a_service_stopped_while_its_loop_is_about_to_select_raises_nothing(
    thread_errors, monkeypatch
):
    service = wsgi.WSGIService(hello)
    held = SelectHeldUntilClosed(service)
    monkeypatch.setattr(wasyncore, "select", held)
    held.armed.set()
    service.start()

    service.stop()

    assert thread_errors == []


def test_a_stopped_service_no_longer_accepts_connections():
    service = wsgi.WSGIService(hello)
    service.start()
    host, port = service.server.socket.getsockname()[:2]
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=5) as answer:
        assert answer.read() == b"hello"

    service.stop()

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=5)


def test_stopping_twice_or_before_starting_does_nothing_more():
    never_started = wsgi.WSGIService(hello)
    never_started.stop()
    never_started.stop()
    started = wsgi.WSGIService(hello)
    started.start()
    started.stop()
    started.stop()
