"""Fixtures the functional tests share."""

import pytest

from pcisim.conductor import compute_task


@pytest.fixture
def reschedules(monkeypatch):
    """The reasons of every reschedule any conductor of this process is asked for."""
    reasons, reschedule = [], compute_task.ComputeTaskManager.reschedule

    def counted(self, context, instance, request_spec, reason):
        reasons.append(reason)
        return reschedule(self, context, instance, request_spec, reason)

    monkeypatch.setattr(compute_task.ComputeTaskManager, "reschedule", counted)
    return reasons
