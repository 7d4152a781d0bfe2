"""``orphaned``: the allocations no flow will release, for an operator's audit."""

import uuid

from pcisim.db import allocations, api
from tests.unit.db import factories

ONE_VCPU = {"VCPU": 1}


def _allocate(ctxt, node, consumer_uuid):
    generation = allocations.host_states(ctxt, [node.id])[0][0].generation
    allocations.claim(ctxt, node.id, generation, consumer_uuid, ONE_VCPU)


def test_an_allocation_of_a_live_instance_on_its_node_is_not_orphaned(db, ctxt):
    node = factories.compute_node(ctxt)
    _allocate(ctxt, node, factories.instance(ctxt).uuid)

    assert allocations.orphaned(ctxt) == []


def test_an_allocation_without_an_instance_row_is_orphaned(db, ctxt):
    node = factories.compute_node(ctxt)
    consumer = str(uuid.uuid4())
    _allocate(ctxt, node, consumer)

    assert allocations.orphaned(ctxt) == [(node.id, consumer)]


def test_an_allocation_of_an_instance_on_another_node_is_orphaned(db, ctxt):
    node = factories.compute_node(ctxt)
    elsewhere = factories.instance(ctxt, node="node2")
    _allocate(ctxt, node, elsewhere.uuid)

    assert allocations.orphaned(ctxt) == [(node.id, elsewhere.uuid)]


def test_an_allocation_written_back_for_an_instance_in_error_is_orphaned(db, ctxt):
    node = factories.compute_node(ctxt)
    failed = factories.instance(ctxt)
    api.instance_update(ctxt, failed.uuid, {"vm_state": "error"})
    _allocate(ctxt, node, failed.uuid)

    assert allocations.orphaned(ctxt) == [(node.id, failed.uuid)]


def test_an_allocation_of_a_soft_deleted_instance_is_orphaned(db, ctxt):
    node = factories.compute_node(ctxt)
    gone = factories.instance(ctxt)
    api.instance_destroy(ctxt, gone.uuid)
    _allocate(ctxt, node, gone.uuid)

    assert allocations.orphaned(ctxt) == [(node.id, gone.uuid)]
