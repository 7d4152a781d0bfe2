"""``engine.write_transaction(core=True)``: a writer transaction on a Core connection.

The scheduler's claim runs in one (the allocation and the instance's row), and so do a
compute's saves with devices; a ``writer`` called there, such as the instance's PCI
requests' save, joins through a Session of its own. Both kinds commit together, and
an error rolls both back.
"""

import pytest

from pcisim.db import allocations as db_allocations
from pcisim.db import api as db_api
from pcisim.db import engine
from tests.unit.db import factories

ALLOCATION = {"VCPU": 1, "MEMORY_MB": 512}
REQUESTS = '{"requests": []}'


class Refused(Exception):
    """What the block raises after its writes."""


def _write_both_kinds(ctxt, node, instance):
    db_allocations.claim(ctxt, node.id, node.generation, instance.uuid, ALLOCATION)
    db_api.instance_extra_update_by_uuid(ctxt, instance.uuid, {"pci_requests": REQUESTS})


def _requests(ctxt, instance):
    return db_api.instance_extra_get_by_instance_uuid(ctxt, instance.uuid).pci_requests


def test_writers_of_both_kinds_in_a_core_write_transaction_commit_together(db, ctxt):
    node, instance = factories.compute_node(ctxt), factories.instance(ctxt)

    with engine.write_transaction(ctxt, core=True):
        _write_both_kinds(ctxt, node, instance)

    assert db_allocations.get_by_consumer(ctxt, instance.uuid) == {node.id: ALLOCATION}
    assert _requests(ctxt, instance) == REQUESTS


def test_an_error_in_a_core_write_transaction_rolls_back_the_writers_of_both_kinds(db, ctxt):
    node, instance = factories.compute_node(ctxt), factories.instance(ctxt)

    with pytest.raises(Refused), engine.write_transaction(ctxt, core=True):
        _write_both_kinds(ctxt, node, instance)
        raise Refused()

    assert db_allocations.get_by_consumer(ctxt, instance.uuid) == {}
    assert _requests(ctxt, instance) == "[]"  # as the factory made it
    assert db_api.compute_node_get(ctxt, node.id).generation == node.generation
