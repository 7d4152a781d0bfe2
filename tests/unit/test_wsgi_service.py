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


def _keep_alive_connection(service):
    host, port = service.server.socket.getsockname()[:2]
    connection = socket.create_connection((host, port), timeout=5)
    connection.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
    answer = b""
    while not answer.endswith(b"hello"):
        answer += connection.recv(1024)
    assert answer.startswith(b"HTTP/1.1 200")
    return connection


def test_stop_closes_an_open_keep_alive_connection():
    service = wsgi.WSGIService(hello)
    service.start()
    connection = _keep_alive_connection(service)

    service.stop()

    with connection:
        assert connection.recv(1024) == b""


def test_stopping_right_after_starting_many_times_raises_nothing(thread_errors):
    for _ in range(100):
        service = wsgi.WSGIService(hello)
        service.start()
        service.stop()

    assert thread_errors == []
