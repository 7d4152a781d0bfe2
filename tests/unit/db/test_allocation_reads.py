"""What the scheduler reads of a node: a generation and a usage that a claim's swap can
trust, even when another claim commits while it reads."""

import threading
import uuid

import pytest
import sqlalchemy as sa

from pcisim import context as pcisim_context
from pcisim.db import allocations
from tests.unit.db import factories

ONE_VCPU = {"VCPU": 1}


def _generation(ctxt, node):
    return allocations.host_states(ctxt, [node.id])[0][0].generation


def _claim_in_another_thread(node, generation):
    """Commit a claim from another thread (its own transaction) and wait for it."""
    errors = []

    def claim():
        try:
            ctxt = pcisim_context.get_admin_context()
            allocations.claim(ctxt, node.id, generation, str(uuid.uuid4()), ONE_VCPU)
        except Exception as error:  # reported by the test below
            errors.append(error)

    worker = threading.Thread(target=claim)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and errors == []


@pytest.fixture
def claim_after_first_read(db):
    """Arrange for a claim to commit right after the reading thread's first statement."""
    reader_thread = threading.current_thread()
    engine = db.manager.writer.get_engine()
    armed = {}

    def after(conn, cursor, statement, parameters, context, executemany):
        if threading.current_thread() is reader_thread and armed.pop("node", None):
            _claim_in_another_thread(armed.pop("at"), armed.pop("generation"))

    sa.event.listen(engine, "after_cursor_execute", after)
    yield lambda node, generation: armed.update(node=True, at=node, generation=generation)
    sa.event.remove(engine, "after_cursor_execute", after)


def test_a_claim_committed_while_states_are_read_is_never_missed_at_the_new_generation(
    db, ctxt, claim_after_first_read
):
    node = factories.compute_node(ctxt)
    before = _generation(ctxt, node)
    claim_after_first_read(node, before)

    (row,), used = allocations.host_states(ctxt, [node.id])

    seen = (row.generation, used[node.id].get("VCPU", 0))
    assert seen in {(before, 0), (before, 1), (before + 1, 1)}
