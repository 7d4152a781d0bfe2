"""Fixtures the functional tests share."""

import contextlib

import pytest

from pcisim import trace
from pcisim.conductor import compute_task
from tests.functional import flows


@pytest.fixture
def reschedules(monkeypatch):
    """The reasons of every reschedule any conductor of this process is asked for."""
    reasons, reschedule = [], compute_task.ComputeTaskManager.reschedule

    def counted(self, context, instance, request_spec, reason):
        reasons.append(reason)
        return reschedule(self, context, instance, request_spec, reason)

    monkeypatch.setattr(compute_task.ComputeTaskManager, "reschedule", counted)
    return reasons


@pytest.fixture
def start(db):
    """Start a control plane of ``{host: '[compute] inventory' value}`` (a module may
    define a ``start`` of its own, taking more)."""
    with contextlib.ExitStack() as running:
        yield lambda hosts: running.enter_context(flows.control_plane(hosts))


@pytest.fixture
def recording(tmp_path):
    """Every RPC message of the test recorded to a trace file; its path."""
    path = tmp_path / "trace.jsonl"
    trace.start(str(path), default_actor="test")
    yield str(path)
    trace.stop()
