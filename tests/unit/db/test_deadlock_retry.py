"""``engine.retry_on_deadlock`` runs a transaction again only where it is the outermost.

A deadlock's victim is the whole transaction. Run again inside an outer transaction,
a DB API call would commit its own write without the outer one's earlier writes; so
there the error goes up, and the outermost retry runs everything again.
"""

import pytest
from oslo_db import exception as db_exc

from pcisim.db import api as db_api
from pcisim.db import engine
from tests.unit.db import factories


def _deadlocking_once(calls):
    """A DB API writer that records its call, and is the victim the first time."""

    @engine.retry_on_deadlock
    @engine.writer
    def write(context, instance_uuid, state):
        calls.append(state)
        db_api.instance_update(context, instance_uuid, {"vm_state": state})
        if len(calls) == 1:
            raise db_exc.DBDeadlock()

    return write


def test_an_outermost_transaction_that_loses_a_deadlock_runs_again_whole(db, ctxt):
    instance = factories.instance(ctxt, vm_state="building")
    calls = []

    _deadlocking_once(calls)(ctxt, instance.uuid, "active")

    assert calls == ["active", "active"]
    assert db_api.instance_get_by_uuid(ctxt, instance.uuid).vm_state == "active"


def test_a_transaction_inside_another_leaves_a_deadlock_to_the_outer_one(db, ctxt):
    instance = factories.instance(ctxt, vm_state="building")
    calls = []

    with pytest.raises(db_exc.DBDeadlock), engine.write_transaction(ctxt):
        db_api.instance_update(ctxt, instance.uuid, {"task_state": "spawning"})
        _deadlocking_once(calls)(ctxt, instance.uuid, "active")

    assert calls == ["active"]
    unchanged = db_api.instance_get_by_uuid(ctxt, instance.uuid)
    assert (unchanged.vm_state, unchanged.task_state) == (instance.vm_state, instance.task_state)


def test_in_transaction_is_true_only_inside_a_transaction_of_the_context(db, ctxt):
    assert not engine.in_transaction(ctxt)
    with engine.read_transaction(ctxt):
        assert engine.in_transaction(ctxt)
    assert not engine.in_transaction(ctxt)
