"""Allocations: the compare-and-swap that writes them, the calls that release and heal
them, and the node and instance writes that move a node's generation, on every backend.

What the scheduler reads while a claim commits is tested in test_allocation_reads.py,
the orphan audit in test_allocation_orphans.py.
"""

import uuid

import pytest
import sqlalchemy as sa

from pcisim import exception
from pcisim.db import allocations, api, engine, models
from tests.unit.db import factories

ONE_VCPU = {"VCPU": 1}
SMALL = {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 10, "PCI:type-VF:8086:1520:0:pf:-": 1}
ALLOCATIONS = models.Allocation.__table__


def _generation(ctxt, node):
    """The node's generation as the scheduler reads it."""
    (row,), _ = allocations.host_states(ctxt, [node.id])
    return row.generation


def _claim(ctxt, node, consumer, resources=ONE_VCPU):
    return allocations.claim(ctxt, node.id, _generation(ctxt, node), consumer, resources)


def _rows():
    """Every allocation row as (node id, consumer, resource, used), sorted."""
    query = sa.select(
        ALLOCATIONS.c.compute_node_id,
        ALLOCATIONS.c.consumer_uuid,
        ALLOCATIONS.c.resource,
        ALLOCATIONS.c.used,
    )
    with engine.get_engine().connect() as connection:
        return sorted(tuple(row) for row in connection.execute(query))


def _consumer():
    return str(uuid.uuid4())


# ---------------------------------------------------------------------- claim


def test_a_claim_at_the_current_generation_writes_the_allocation(db, ctxt):
    node = factories.compute_node(ctxt)
    consumer = _consumer()

    _claim(ctxt, node, consumer, SMALL)

    assert _rows() == sorted((node.id, consumer, name, used) for name, used in SMALL.items())


def test_a_claim_at_the_current_generation_bumps_it_and_returns_the_new_one(db, ctxt):
    node = factories.compute_node(ctxt)
    before = _generation(ctxt, node)

    returned = allocations.claim(ctxt, node.id, before, _consumer(), ONE_VCPU)

    assert returned == before + 1 == _generation(ctxt, node)


def test_a_claim_writes_no_row_for_a_resource_of_zero(db, ctxt):
    node = factories.compute_node(ctxt)
    consumer = _consumer()

    _claim(ctxt, node, consumer, {"VCPU": 1, "DISK_GB": 0})

    assert _rows() == [(node.id, consumer, "VCPU", 1)]


def test_a_claim_at_a_stale_generation_conflicts_and_writes_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    stale = _generation(ctxt, node)
    first = _consumer()
    allocations.claim(ctxt, node.id, stale, first, ONE_VCPU)
    rows, generation = _rows(), _generation(ctxt, node)

    with pytest.raises(exception.ComputeNodeGenerationConflict):
        allocations.claim(ctxt, node.id, stale, _consumer(), ONE_VCPU)

    assert (_rows(), _generation(ctxt, node)) == (rows, generation)


def test_a_claim_on_a_deleted_node_conflicts_and_writes_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    generation = _generation(ctxt, node)
    api.compute_node_delete(ctxt, node.id)

    with pytest.raises(exception.ComputeNodeGenerationConflict):
        allocations.claim(ctxt, node.id, generation, _consumer(), ONE_VCPU)

    assert _rows() == []


def test_claims_of_one_consumer_on_two_nodes_bump_each_node_once(db, ctxt):
    one, two = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    before = (_generation(ctxt, one), _generation(ctxt, two))
    consumer = _consumer()

    _claim(ctxt, one, consumer)
    _claim(ctxt, two, consumer)

    assert (_generation(ctxt, one), _generation(ctxt, two)) == (before[0] + 1, before[1] + 1)


# ------------------------------------------------------------ release, remove


def test_release_removes_the_consumers_rows_on_every_node_and_returns_their_number(db, ctxt):
    one, two = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    leaving, staying = _consumer(), _consumer()
    _claim(ctxt, one, leaving, {"VCPU": 1, "MEMORY_MB": 256})
    _claim(ctxt, two, leaving)
    _claim(ctxt, one, staying)

    assert allocations.release(ctxt, leaving) == 3

    assert _rows() == [(one.id, staying, "VCPU", 1)]


def test_release_bumps_the_generation_of_each_node_the_consumer_held(db, ctxt):
    one, two, other = (factories.compute_node(ctxt, f"host{i}", f"node{i}") for i in range(1, 4))
    consumer = _consumer()
    _claim(ctxt, one, consumer)
    _claim(ctxt, two, consumer)
    before = [_generation(ctxt, node) for node in (one, two, other)]

    allocations.release(ctxt, consumer)

    after = [_generation(ctxt, node) for node in (one, two, other)]
    assert after == [before[0] + 1, before[1] + 1, before[2]]


def test_release_of_a_consumer_without_allocations_changes_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    _claim(ctxt, node, _consumer())
    rows, generation = _rows(), _generation(ctxt, node)

    assert allocations.release(ctxt, _consumer()) == 0

    assert (_rows(), _generation(ctxt, node)) == (rows, generation)


def test_remove_on_node_removes_every_allocation_there_and_none_elsewhere(db, ctxt):
    going, staying = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    consumer = _consumer()
    _claim(ctxt, going, consumer)
    _claim(ctxt, going, _consumer())
    _claim(ctxt, staying, consumer)

    with engine.get_engine().begin() as connection:
        allocations.remove_on_node(connection, going.id)

    assert _rows() == [(staying.id, consumer, "VCPU", 1)]


def test_deleting_a_node_removes_the_allocations_on_it(db, ctxt):
    node = factories.compute_node(ctxt)
    _claim(ctxt, node, _consumer())

    api.compute_node_delete(ctxt, node.id)

    assert _rows() == []


# -------------------------------------------------------------------- reads


def test_get_by_consumer_returns_what_it_holds_on_each_node(db, ctxt):
    one, two = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    consumer = _consumer()
    _claim(ctxt, one, consumer, {"VCPU": 2, "MEMORY_MB": 512})
    _claim(ctxt, two, consumer, {"DISK_GB": 5})
    _claim(ctxt, one, _consumer(), {"VCPU": 7})

    assert allocations.get_by_consumer(ctxt, consumer) == {
        one.id: {"VCPU": 2, "MEMORY_MB": 512},
        two.id: {"DISK_GB": 5},
    }


def test_get_by_consumer_of_an_unknown_consumer_is_empty(db, ctxt):
    assert allocations.get_by_consumer(ctxt, _consumer()) == {}


def test_host_states_sum_the_usage_of_every_consumer_per_resource(db, ctxt):
    node = factories.compute_node(ctxt)
    _claim(ctxt, node, _consumer(), {"VCPU": 2, "MEMORY_MB": 512})
    _claim(ctxt, node, _consumer(), {"VCPU": 3})

    _, used = allocations.host_states(ctxt)

    assert used == {node.id: {"VCPU": 5, "MEMORY_MB": 512}}


def test_changed_host_states_return_only_nodes_whose_generation_moved(db, ctxt):
    moved, still = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    known = {node.id: _generation(ctxt, node) for node in (moved, still)}
    _claim(ctxt, moved, _consumer(), {"VCPU": 3})

    rows, used, live = allocations.changed_host_states(ctxt, known)

    assert [(row.id, row.generation) for row in rows] == [(moved.id, known[moved.id] + 1)]
    assert used == {moved.id: {"VCPU": 3}}
    assert live == {moved.id, still.id}


def test_changed_host_states_return_a_node_not_known_yet(db, ctxt):
    known = factories.compute_node(ctxt)
    new = factories.compute_node(ctxt, "host2", "node2")

    rows, _, live = allocations.changed_host_states(ctxt, {known.id: _generation(ctxt, known)})

    assert [row.id for row in rows] == [new.id]
    assert live == {known.id, new.id}


def test_changed_host_states_leave_a_deleted_node_out_of_the_live_ids(db, ctxt):
    gone, kept = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    known = {node.id: _generation(ctxt, node) for node in (gone, kept)}
    api.compute_node_delete(ctxt, gone.id)

    rows, _, live = allocations.changed_host_states(ctxt, known)

    assert (rows, live) == ([], {kept.id})


def test_the_nodes_signature_stays_while_nothing_changes(db, ctxt):
    factories.compute_node(ctxt)
    factories.compute_node(ctxt, "host2", "node2")

    assert allocations.nodes_signature(ctxt) == allocations.nodes_signature(ctxt)


def test_the_nodes_signature_of_no_node(db, ctxt):
    assert allocations.nodes_signature(ctxt) == (0, 0, 0)


@pytest.mark.parametrize(
    "change",
    ["claim", "release", "inventory", "new node", "deleted node", "one went, one came"],
)
def test_the_nodes_signature_moves_with_every_change_the_scheduler_must_see(db, ctxt, change):
    node, other = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    consumer = _consumer()
    _claim(ctxt, node, consumer)
    before = allocations.nodes_signature(ctxt)

    if change == "claim":
        _claim(ctxt, other, _consumer())
    elif change == "release":
        allocations.release(ctxt, consumer)
    elif change == "inventory":
        api.compute_node_update(ctxt, other.id, {"memory_mb": 1024})
    elif change == "new node":
        factories.compute_node(ctxt, "host3", "node3")
    elif change == "deleted node":
        api.compute_node_delete(ctxt, other.id)
    else:
        api.compute_node_delete(ctxt, other.id)
        factories.compute_node(ctxt, "host3", "node3")

    assert allocations.nodes_signature(ctxt) != before


# --------------------------------------------------------------------- heal


def test_heal_adds_the_allocation_of_a_held_instance_that_has_none(db, ctxt):
    node = factories.compute_node(ctxt)
    held = factories.instance(ctxt).uuid
    before = _generation(ctxt, node)

    healed = allocations.heal(ctxt, node.id, {held: {"VCPU": 2, "MEMORY_MB": 256}})

    assert healed == {"added": [held], "removed": []}
    assert allocations.get_by_consumer(ctxt, held) == {node.id: {"VCPU": 2, "MEMORY_MB": 256}}
    assert _generation(ctxt, node) == before + 1


def test_heal_leaves_an_existing_allocation_of_a_held_instance_as_it_is(db, ctxt):
    # NOTE: heal only adds missing consumers; it does not rewrite amounts.
    node = factories.compute_node(ctxt)
    held = factories.instance(ctxt).uuid
    _claim(ctxt, node, held, {"VCPU": 1})
    before = _generation(ctxt, node)

    healed = allocations.heal(ctxt, node.id, {held: {"VCPU": 4}})

    assert healed == {"added": [], "removed": []}
    assert allocations.get_by_consumer(ctxt, held) == {node.id: {"VCPU": 1}}
    assert _generation(ctxt, node) == before


def test_heal_removes_the_allocation_of_an_instance_the_compute_no_longer_holds(db, ctxt):
    node = factories.compute_node(ctxt)
    gone = factories.instance(ctxt)
    _claim(ctxt, node, gone.uuid)
    api.instance_destroy(ctxt, gone.uuid)
    before = _generation(ctxt, node)

    healed = allocations.heal(ctxt, node.id, {})

    assert healed == {"added": [], "removed": [gone.uuid]}
    assert _rows() == []
    assert _generation(ctxt, node) == before + 1


def test_heal_keeps_the_allocation_of_a_live_instance_the_compute_does_not_hold_yet(db, ctxt):
    # NOTE: the scheduler writes a building instance's allocation before its compute
    # claims anything: a live instance of this node is not released by a heal.
    node = factories.compute_node(ctxt)
    building = factories.instance(ctxt, vm_state="building")
    _claim(ctxt, node, building.uuid)

    assert allocations.heal(ctxt, node.id, {}) == {"added": [], "removed": []}

    assert _rows() == [(node.id, building.uuid, "VCPU", 1)]


def test_heal_removes_the_allocation_of_an_instance_in_error(db, ctxt):
    node = factories.compute_node(ctxt)
    failed = factories.instance(ctxt)
    api.instance_update(ctxt, failed.uuid, {"vm_state": "error"})
    _claim(ctxt, node, failed.uuid)

    assert allocations.heal(ctxt, node.id, {failed.uuid: {"VCPU": 1}}) == {
        "added": [],
        "removed": [failed.uuid],
    }
    assert _rows() == []


def test_heal_does_not_add_an_allocation_for_an_instance_of_another_node(db, ctxt):
    node = factories.compute_node(ctxt)
    elsewhere = factories.instance(ctxt, node="node2")

    assert allocations.heal(ctxt, node.id, {elsewhere.uuid: {"VCPU": 1}}) == {
        "added": [],
        "removed": [],
    }
    assert _rows() == []


def test_heal_leaves_the_allocations_on_other_nodes_alone(db, ctxt):
    node, other = factories.compute_node(ctxt), factories.compute_node(ctxt, "host2", "node2")
    theirs = factories.instance(ctxt, host="host2", node="node2")
    orphan = _consumer()
    _claim(ctxt, other, theirs.uuid)
    _claim(ctxt, other, orphan)
    before = _generation(ctxt, other)

    allocations.heal(ctxt, node.id, {})

    assert _rows() == sorted([(other.id, theirs.uuid, "VCPU", 1), (other.id, orphan, "VCPU", 1)])
    assert _generation(ctxt, other) == before


def test_heal_with_nothing_to_change_keeps_the_generation(db, ctxt):
    node = factories.compute_node(ctxt)
    held = factories.instance(ctxt).uuid
    _claim(ctxt, node, held)
    before = _generation(ctxt, node)

    allocations.heal(ctxt, node.id, {held: {"VCPU": 1}})

    assert _generation(ctxt, node) == before


def test_heal_of_a_deleted_node_raises_node_not_found(db, ctxt):
    node = factories.compute_node(ctxt)
    api.compute_node_delete(ctxt, node.id)

    with pytest.raises(exception.ComputeNodeNotFound):
        allocations.heal(ctxt, node.id, {})


# ---------------------------------------------- node and instance writes


@pytest.mark.parametrize(
    ("column", "value"),
    [("vcpus", 32), ("memory_mb", 1024), ("local_gb", 10), ("pci_inventory", "[]")],
)
def test_a_node_update_that_changes_its_inventory_bumps_its_generation(db, ctxt, column, value):
    node = factories.compute_node(ctxt)
    before = _generation(ctxt, node)

    api.compute_node_update(ctxt, node.id, {column: value})

    assert _generation(ctxt, node) == before + 1


def test_a_node_update_that_saves_its_inventory_unchanged_keeps_its_generation(db, ctxt):
    node = factories.compute_node(ctxt, pci_inventory="[]")
    before = _generation(ctxt, node)

    api.compute_node_update(
        ctxt,
        node.id,
        {"vcpus": node.vcpus, "memory_mb": node.memory_mb, "local_gb": node.local_gb}
        | {"pci_inventory": "[]", "vcpus_used": 3},
    )

    assert _generation(ctxt, node) == before


def test_a_node_update_that_changes_its_inventory_among_other_columns_bumps_it_once(db, ctxt):
    node = factories.compute_node(ctxt, pci_inventory="[]")
    before = _generation(ctxt, node)

    api.compute_node_update(ctxt, node.id, {"vcpus_used": 3, "pci_inventory": "{}", "vcpus": 64})

    assert _generation(ctxt, node) == before + 1
    stored = api.compute_node_get(ctxt, node.id)
    assert (stored.vcpus_used, stored.pci_inventory, stored.vcpus) == (3, "{}", 64)


def test_a_node_update_of_a_deleted_node_raises_not_found_and_writes_nothing(db, ctxt):
    node = factories.compute_node(ctxt)
    api.compute_node_delete(ctxt, node.id)

    with pytest.raises(exception.ComputeNodeNotFound):
        api.compute_node_update(ctxt, node.id, {"vcpus_used": 3})


def test_a_node_update_refuses_to_set_the_generation(db, ctxt):
    node = factories.compute_node(ctxt)

    with pytest.raises(exception.InvalidInput, match="generation"):
        api.compute_node_update(ctxt, node.id, {"generation": 42})


@pytest.mark.parametrize("vm_state", ["error", "deleted"])
def test_an_instance_update_that_ends_it_keeps_its_allocations_for_its_compute(db, ctxt, vm_state):
    # NOTE: the compute still holds the devices; it releases the allocation as it
    # frees them (release_on_node).
    node = factories.compute_node(ctxt)
    ending = factories.instance(ctxt)
    _claim(ctxt, node, ending.uuid)

    api.instance_update(ctxt, ending.uuid, {"vm_state": vm_state})

    assert _rows() == [(node.id, ending.uuid, "VCPU", 1)]


@pytest.mark.parametrize("vm_state", ["error", "deleted"])
def test_an_instance_update_that_ends_it_releases_its_allocations_when_asked(db, ctxt, vm_state):
    node = factories.compute_node(ctxt)
    ending, other = factories.instance(ctxt), factories.instance(ctxt)
    _claim(ctxt, node, ending.uuid)
    _claim(ctxt, node, other.uuid)
    before = _generation(ctxt, node)

    api.instance_update(ctxt, ending.uuid, {"vm_state": vm_state}, release_allocations=True)

    assert _rows() == [(node.id, other.uuid, "VCPU", 1)]
    assert _generation(ctxt, node) == before + 1


def test_an_instance_update_that_does_not_end_it_keeps_its_allocations_when_asked(db, ctxt):
    node = factories.compute_node(ctxt)
    running = factories.instance(ctxt, vm_state="building")
    _claim(ctxt, node, running.uuid)
    before = _generation(ctxt, node)

    api.instance_update(
        ctxt, running.uuid, {"vm_state": "active", "task_state": None}, release_allocations=True
    )

    assert _rows() == [(node.id, running.uuid, "VCPU", 1)]
    assert _generation(ctxt, node) == before


def test_destroying_an_instance_keeps_its_allocations_for_its_compute(db, ctxt):
    node = factories.compute_node(ctxt)
    gone = factories.instance(ctxt)
    _claim(ctxt, node, gone.uuid)

    api.instance_destroy(ctxt, gone.uuid)

    assert _rows() == [(node.id, gone.uuid, "VCPU", 1)]


def test_destroying_an_instance_releases_its_allocations_when_asked(db, ctxt):
    node = factories.compute_node(ctxt)
    gone = factories.instance(ctxt)
    _claim(ctxt, node, gone.uuid)

    api.instance_destroy(ctxt, gone.uuid, release_allocations=True)

    assert _rows() == []


def test_release_on_node_removes_the_consumers_allocations_there_only(db, ctxt):
    node, other_node = factories.compute_node(ctxt), factories.compute_node(ctxt, host="host2")
    freed, kept = _consumer(), _consumer()
    _claim(ctxt, node, freed)
    _claim(ctxt, node, kept)
    _claim(ctxt, other_node, freed)
    before = _generation(ctxt, node)

    assert allocations.release_on_node(ctxt, node.id, [freed]) == 1

    assert _rows() == sorted([(node.id, kept, "VCPU", 1), (other_node.id, freed, "VCPU", 1)])
    assert _generation(ctxt, node) == before + 1


def test_release_on_node_of_a_consumer_without_allocations_keeps_the_generation(db, ctxt):
    node = factories.compute_node(ctxt)
    before = _generation(ctxt, node)

    assert allocations.release_on_node(ctxt, node.id, [_consumer()]) == 0

    assert _generation(ctxt, node) == before
