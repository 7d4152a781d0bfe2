"""Recording the messages of a flow: who sent what to whom, in which version, how long.

With ``--trace`` a service appends one JSON line per message to ``[DEFAULT] trace_file``:
every RPC call or cast it sends (with the object and remotable method it carries) and
every HTTP request it answers. Records of one flow share the request id of the context
that travels with every message, so a boot is the HTTP request, the casts to the
conductor and the compute, and every object call the compute makes for it.
``pcisim trace`` reads the file back (``pcisim.trace_report``).

The sender of a message is the *actor* of the sending thread: the service whose RPC
server dispatched the message the thread is handling (``conductor``, a compute's host),
``api`` while an HTTP request is served, or else the process's default. Actors are
per thread because the all-in-one runs every service in one process.

Several processes may append to one file: each record is one ``write`` on a file
opened with ``O_APPEND``. Past ``max_bytes`` the file is renamed to ``FILE.1`` (the
previous ``FILE.1`` is dropped) and a new one begun. Writers take ``FILE.lock``
(``flock``) around each check-rotate-write, and one that finds ``FILE`` rotated by
another reopens it, so that no writer renames another's fresh file.
"""

import contextlib
import fcntl
import json
import os
import threading
import time

from pcisim import telemetry

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# Where the embedded defaults record (``[DEFAULT] trace_file`` under ``./state``).
DEFAULT_FILE = os.path.join("state", "trace.jsonl")

_local = threading.local()
_recorder = None


class Recorder:
    """Appends records to ``path`` as JSON lines."""

    def __init__(self, path, default_actor, max_bytes=DEFAULT_MAX_BYTES):
        self.path = os.path.abspath(path)
        self.default_actor = default_actor
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._lock_fd = os.open(self.path + ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
        self._fd = self._open()

    def _open(self):
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record):
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock, self._writers_excluded():
            self._follow_rotation()
            if os.fstat(self._fd).st_size + len(line) > self.max_bytes:
                self._rotate()
            os.write(self._fd, line)

    @contextlib.contextmanager
    def _writers_excluded(self):
        """No other process's recorder writes or rotates ``path`` meanwhile."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _follow_rotation(self):
        """Reopen ``path`` if another writer rotated it since this one opened it."""
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                return
        os.close(self._fd)
        self._fd = self._open()

    def _rotate(self):
        os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, self.path + ".1")
        self._fd = self._open()

    def close(self):
        with self._lock:
            os.close(self._fd)
            os.close(self._lock_fd)


def start(path, default_actor, max_bytes=DEFAULT_MAX_BYTES):
    """Record every message of this process to ``path`` from now on."""
    start_recorder(Recorder(path, default_actor, max_bytes))


def start_recorder(recorder):
    """Record every message of this process into ``recorder`` from now on: anything
    with a ``default_actor``, ``write(record)`` (called from any thread) and
    ``close()``, as bench/scale.py's, which counts the messages of each flow in memory."""
    global _recorder
    stop()
    _recorder = recorder


def stop():
    """Stop recording; the file keeps what was written."""
    global _recorder
    recorder, _recorder = _recorder, None
    if recorder is not None:
        recorder.close()


def path():
    """The file being recorded to, or None when tracing is off."""
    recorder = _recorder
    return None if recorder is None else recorder.path


def actor():
    """Who this thread acts for."""
    name = getattr(_local, "actor", None)
    if name is None and _recorder is not None:
        return _recorder.default_actor
    return name


def set_actor(name):
    """This thread acts for ``name`` until told otherwise (a dispatch thread is reused
    for every message its server takes, and each sets it again); returns whom it
    acted for before."""
    previous, _local.actor = getattr(_local, "actor", None), name
    return previous


@contextlib.contextmanager
def acting_as(name):
    previous = set_actor(name)
    try:
        yield
    finally:
        set_actor(previous)


def record(context, sender, receiver, kind, method, started, seconds, outcome, **details):
    """Record one message of the flow of ``context`` (a no-op unless tracing is on).

    ``started`` is the wall-clock time it was sent, ``seconds`` how long the sender
    waited: until the reply for a call and an HTTP request, until it was sent for a cast.
    """
    recorder = _recorder
    if recorder is None:
        return
    recorder.write(
        {
            "ts": round(started, 6),
            "request_id": getattr(context, "request_id", None),
            "from": sender,
            "to": receiver,
            "kind": kind,
            "method": method,
            "ms": round(seconds * 1000, 3),
            "outcome": outcome,
            **{name: value for name, value in details.items() if value is not None},
        }
    )


class TracingClient:
    """An oslo.messaging RPC client (or prepared call context) whose calls and casts
    are recorded while tracing is on; with tracing off it adds one check per message.
    While ``pcisim.telemetry`` exports, the span oslo.messaging makes of a message takes
    the object it carries (``carried_object``)."""

    def __init__(self, client):
        self._client = client

    def prepare(self, **kwargs):
        return TracingClient(self._client.prepare(**kwargs))

    def can_send_version(self, version):
        return self._client.can_send_version(version)

    def call(self, ctxt, method, **kwargs):
        return self._send("call", ctxt, method, kwargs)

    def cast(self, ctxt, method, **kwargs):
        return self._send("cast", ctxt, method, kwargs)

    def _send(self, kind, ctxt, method, kwargs):
        if telemetry.exporting():
            with telemetry.carrying(carried_object(kwargs)):
                return self._recorded(kind, ctxt, method, kwargs)
        return self._recorded(kind, ctxt, method, kwargs)

    def _recorded(self, kind, ctxt, method, kwargs):
        send = getattr(self._client, kind)
        if _recorder is None:
            return send(ctxt, method, **kwargs)
        started, clock, outcome = time.time(), time.perf_counter(), "ok"
        try:
            return send(ctxt, method, **kwargs)
        except Exception as error:
            # oslo.messaging raises a remote error as a subclass named <class>_Remote
            outcome = type(error).__name__.removesuffix("_Remote")
            raise
        finally:
            target = self._client.target
            record(
                ctxt,
                actor(),
                target.server or target.topic,
                kind,
                method,
                started,
                time.perf_counter() - clock,
                outcome,
                topic=target.topic,
                server=target.server,
                version=target.version,
                **carried_object(kwargs),
            )


def carried_object(kwargs):
    """The object (and remotable method) an indirection call carries, with the version
    the sender holds it in; nothing for other messages."""
    instance = kwargs.get("objinst")
    if instance is not None:
        name, version = instance.obj_name(), instance.VERSION
    elif "objname" in kwargs:
        name = kwargs["objname"]
        version = (kwargs.get("object_versions") or {}).get(name, kwargs.get("objver"))
    else:
        return {}
    return {"object": name, "object_method": kwargs.get("objmethod"), "object_version": version}
