"""Allocations: what each instance holds of a node, written when the scheduler chooses it.

A node's free capacity, as the scheduler sees it, is its inventory (the node's columns
and its PCI inventory) less the sum of the allocations on it. Every change of either
bumps the node's ``generation``; an allocation is written only by a compare-and-swap
on the generation the scheduler read (``claim``), so two schedulers that chose the same
node from the same view never both write: the second gets
``ComputeNodeGenerationConflict``, reads again and chooses again.

SQLAlchemy Core throughout: these run for every boot and delete, on indexed columns.
"""

import collections

import sqlalchemy as sa
from oslo_utils import timeutils

from pcisim import exception
from pcisim.db import models
from pcisim.db.engine import core_writer, reader, writer

NODES = models.ComputeNode.__table__
ALLOCATIONS = models.Allocation.__table__
INSTANCES = models.Instance.__table__
STATE_COLUMNS = (
    NODES.c.id,
    NODES.c.host,
    NODES.c.hypervisor_hostname,
    NODES.c.generation,
    NODES.c.vcpus,
    NODES.c.memory_mb,
    NODES.c.local_gb,
    NODES.c.pci_inventory,
)
ERROR = "error"
# The statuses of a device an instance holds.
HELD = ("claimed", "allocated")

# NOTE: the statements a scheduling decision runs are built once: building them (their
# clauses and cache keys) cost as much CPU as SQLite took to run them.
_GENERATIONS = sa.select(NODES.c.id, NODES.c.generation).where(NODES.c.deleted == 0)
_SIGNATURE = sa.select(
    sa.func.count(),
    sa.func.coalesce(sa.func.sum(NODES.c.id), 0),
    sa.func.coalesce(sa.func.sum(NODES.c.generation), 0),
).where(NODES.c.deleted == 0)
_NODES = sa.select(*STATE_COLUMNS).where(NODES.c.deleted == 0).order_by(NODES.c.id)
_USAGE = sa.select(
    ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.resource, sa.func.sum(ALLOCATIONS.c.used)
).group_by(ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.resource)
_SOME_NODES = _NODES.where(NODES.c.id.in_(sa.bindparam("node_ids", expanding=True)))
_SOME_USAGE = _USAGE.where(
    ALLOCATIONS.c.compute_node_id.in_(sa.bindparam("node_ids", expanding=True))
)
_LOCK_NODES = (
    sa.select(NODES.c.id)
    .where(NODES.c.id.in_(sa.bindparam("node_ids", expanding=True)))
    .order_by(NODES.c.id)
    .with_for_update()
)
_SWAP_GENERATION = (
    NODES.update()
    .where(
        NODES.c.id == sa.bindparam("node_id"),
        NODES.c.generation == sa.bindparam("read_generation"),
        NODES.c.deleted == 0,
    )
    .values(generation=NODES.c.generation + 1)
)


@reader
def host_states(context, node_ids=None):
    """The live nodes (``node_ids`` of them, or all) as the scheduler needs them, and
    their usage: ([row], {node id: {resource: used}}).

    The nodes are read before their usage: where each statement sees what was committed
    before it (PostgreSQL's READ COMMITTED), a claim landing between the two reads then
    pairs an old generation with the new usage, which the claim's swap refuses, and
    never the new generation with the old usage, which it would accept."""
    if node_ids is None:
        nodes, usage, parameters = _NODES, _USAGE, {}
    else:
        nodes, usage, parameters = _SOME_NODES, _SOME_USAGE, {"node_ids": list(node_ids)}
    connection = context.session.connection()
    rows = list(connection.execute(nodes, parameters))
    used = collections.defaultdict(dict)
    for node_id, resource, amount in connection.execute(usage, parameters):
        used[node_id][resource] = int(amount)
    return rows, used


@reader
def nodes_signature(context):
    """(number of live nodes, sum of their ids, sum of their generations): one row the
    database sums from an index, which differs from an earlier one whenever a live
    node's generation moved, a node went or a node came since.

    A live node's generation only grows, so with the same nodes an equal sum means no
    generation moved. Ids are never reused (the same assumption ``changed_host_states``
    makes), so a node that came has an id above those of the nodes that went at the
    same time, and the count and the sum of ids cannot both stay; two that came and
    two that went could balance those sums only with ids allocated out of commit
    order, and their generations would have to balance too: ``HostStates`` reads the
    generations again after a lost swap or before it finds no room. (Ids: SQLite's
    tables are AUTOINCREMENT, MariaDB and PostgreSQL count on from the highest given.)"""
    count, ids, generations = context.session.connection().execute(_SIGNATURE).one()
    return int(count), int(ids), int(generations)


@reader
def changed_host_states(context, known):
    """The live nodes whose generation is not the one ``known`` ({node id:
    generation}) holds, as ``host_states`` returns them, and the ids of every live
    node; one transaction, which reads the others' generations from an index only."""
    generations = dict(context.session.connection().execute(_GENERATIONS).all())
    changed = sorted(i for i, g in generations.items() if known.get(i) != g)
    rows, used = host_states(context, changed) if changed else ([], {})
    return rows, used, set(generations)


@core_writer
def claim(context, node_id, generation, consumer_uuid, resources):
    """Allocate ``resources`` ({resource: used}) of node ``node_id`` to the consumer,
    if the node is still at ``generation``; returns the node's new generation.

    Raises ``ComputeNodeGenerationConflict`` (and writes nothing) when the node's
    inventory or allocations changed since that generation was read, or the node went.
    """
    connection = context.connection
    _lock_nodes(connection, [node_id])
    swapped = connection.execute(
        _SWAP_GENERATION, {"node_id": node_id, "read_generation": generation}
    )
    if swapped.rowcount != 1:
        raise exception.ComputeNodeGenerationConflict(node_id=node_id, generation=generation)
    _insert(connection, node_id, {consumer_uuid: resources})
    return generation + 1


@writer
def release(context, consumer_uuid):
    """Remove every allocation of the consumer; returns how many rows went."""
    return release_in(context.session.connection(), consumer_uuid)


def release_in(connection, consumer_uuid):
    """``release`` inside the caller's transaction, on its ``connection``."""
    node_ids = list(
        connection.scalars(
            sa.select(ALLOCATIONS.c.compute_node_id)
            .where(ALLOCATIONS.c.consumer_uuid == consumer_uuid)
            .distinct()
        )
    )
    if not node_ids:
        return 0
    _lock_nodes(connection, node_ids)
    removed = connection.execute(
        ALLOCATIONS.delete().where(
            ALLOCATIONS.c.consumer_uuid == consumer_uuid,
            ALLOCATIONS.c.compute_node_id.in_(node_ids),
        )
    ).rowcount
    _bump(connection, node_ids)
    return removed


@core_writer
def release_on_node(context, node_id, consumer_uuids):
    """Remove the allocations of the consumers on node ``node_id``: what a compute
    does in the transaction that frees their devices there. Returns how many rows
    went; the node's generation moves when any did."""
    connection = context.connection
    _lock_nodes(connection, [node_id])
    removed = connection.execute(
        ALLOCATIONS.delete().where(
            ALLOCATIONS.c.compute_node_id == node_id,
            ALLOCATIONS.c.consumer_uuid.in_(sorted(consumer_uuids)),
        )
    ).rowcount
    if removed:
        _bump(connection, [node_id])
    return removed


def remove_on_node(connection, node_id):
    """Remove every allocation on a node (that goes), in the caller's transaction."""
    connection.execute(ALLOCATIONS.delete().where(ALLOCATIONS.c.compute_node_id == node_id))


@reader
def get_by_consumer(context, consumer_uuid):
    """{node id: {resource: used}} of the consumer's allocations."""
    query = sa.select(
        ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.resource, ALLOCATIONS.c.used
    ).where(ALLOCATIONS.c.consumer_uuid == consumer_uuid)
    found = collections.defaultdict(dict)
    for node_id, resource, used in context.session.connection().execute(query):
        found[node_id][resource] = used
    return dict(found)


@writer
def heal(context, node_id, held):
    """Make node ``node_id``'s allocations agree with what its compute holds.

    ``held``: {instance uuid: {resource: used}}. Returns {"added": [uuid], "removed":
    [uuid]}: allocations added for held instances that had none, removed for consumers
    that are not live, non-ERROR instances on this node. Raises
    ``ComputeNodeNotFound`` for a node that is gone.
    """
    connection = context.session.connection()
    node = connection.execute(
        sa.select(NODES.c.host, NODES.c.hypervisor_hostname)
        .where(NODES.c.id == node_id, NODES.c.deleted == 0)
        .with_for_update()
    ).one_or_none()
    if node is None:
        raise exception.ComputeNodeNotFound(node_id=node_id)
    allocated = set(
        connection.scalars(
            sa.select(ALLOCATIONS.c.consumer_uuid)
            .where(ALLOCATIONS.c.compute_node_id == node_id)
            .distinct()
        )
    )
    live = _live_instances_on(connection, node, allocated | set(held))
    removed = sorted(allocated - live)
    added = sorted(set(held) & live - allocated)
    if removed:
        connection.execute(
            ALLOCATIONS.delete().where(
                ALLOCATIONS.c.compute_node_id == node_id,
                ALLOCATIONS.c.consumer_uuid.in_(removed),
            )
        )
    _insert(connection, node_id, {uuid: held[uuid] for uuid in added})
    if removed or added:
        _bump(connection, [node_id])
    return {"added": added, "removed": removed}


@reader
def orphaned(context):
    """[(node id, consumer uuid)] of the allocations whose consumer is not a live,
    non-ERROR instance on that node: what no flow will release (an operator's audit
    reports them; ``heal`` removes them when the node's compute runs)."""
    holder = INSTANCES.alias("holder")
    query = (
        sa.select(ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.consumer_uuid)
        .join(NODES, NODES.c.id == ALLOCATIONS.c.compute_node_id)
        .outerjoin(
            holder,
            sa.and_(
                holder.c.uuid == ALLOCATIONS.c.consumer_uuid,
                holder.c.deleted == 0,
                holder.c.host == NODES.c.host,
                holder.c.node == NODES.c.hypervisor_hostname,
                sa.or_(holder.c.vm_state.is_(None), holder.c.vm_state != ERROR),
            ),
        )
        .where(holder.c.id.is_(None))
        .group_by(ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.consumer_uuid)
        .order_by(ALLOCATIONS.c.compute_node_id, ALLOCATIONS.c.consumer_uuid)
    )
    return [tuple(row) for row in context.session.connection().execute(query)]


@writer
def release_orphan(context, node_id, consumer_uuid, dry_run=False):
    """Remove the consumer's allocation on node ``node_id`` if it is still orphaned
    there (no live, non-ERROR instance of that uuid is on the node) and the consumer
    holds no device of the node (the free of those ends it); whether it did
    (``dry_run``: would, with an allocation there).

    The node's row is locked first, as a claim's swap of its generation locks it, so a
    claim of the consumer on the node cannot land between the check and the delete."""
    connection = context.session.connection()
    node = connection.execute(
        sa.select(NODES.c.host, NODES.c.hypervisor_hostname)
        .where(NODES.c.id == node_id, NODES.c.deleted == 0)
        .with_for_update()
    ).one_or_none()
    if node is None or _live_instances_on(connection, node, {consumer_uuid}):
        return False
    if _holds_devices_on(connection, node_id, consumer_uuid):
        return False
    if dry_run:
        return bool(get_by_consumer(context, consumer_uuid).get(node_id))
    removed = connection.execute(
        ALLOCATIONS.delete().where(
            ALLOCATIONS.c.compute_node_id == node_id,
            ALLOCATIONS.c.consumer_uuid == consumer_uuid,
        )
    ).rowcount
    if removed:
        _bump(connection, [node_id])
    return bool(removed)


def _holds_devices_on(connection, node_id, consumer_uuid):
    devices = models.PciDevice.__table__
    query = sa.select(devices.c.id).where(
        devices.c.compute_node_id == node_id,
        devices.c.instance_uuid == consumer_uuid,
        devices.c.deleted == 0,
        devices.c.status.in_(HELD),
    )
    return connection.execute(query.limit(1)).first() is not None


def _live_instances_on(connection, node, uuids):
    if not uuids:
        return set()
    query = sa.select(INSTANCES.c.uuid).where(
        INSTANCES.c.uuid.in_(sorted(uuids)),
        INSTANCES.c.deleted == 0,
        INSTANCES.c.host == node.host,
        INSTANCES.c.node == node.hypervisor_hostname,
        sa.or_(INSTANCES.c.vm_state.is_(None), INSTANCES.c.vm_state != ERROR),
    )
    return set(connection.scalars(query))


def _insert(connection, node_id, allocations):
    """Insert {consumer: {resource: used}} on the node; nothing for zero amounts."""
    now = timeutils.utcnow()
    rows = [
        {
            "compute_node_id": node_id,
            "consumer_uuid": consumer,
            "resource": resource,
            "used": used,
            "created_at": now,
            "deleted": 0,
        }
        for consumer, resources in allocations.items()
        for resource, used in sorted(resources.items())
        if used
    ]
    if rows:
        connection.execute(ALLOCATIONS.insert(), rows)


def _lock_nodes(connection, node_ids):
    """Lock the rows of the nodes by their primary key, in the order of their ids,
    before any allocation.

    NOTE: every writer of allocations takes these locks first. On MariaDB a writer that
    held allocation rows (every row its DELETE scanned) while it waited for a node
    deadlocked with one that held the node while it deleted allocations; and a claim
    whose swap found its node through the (deleted, id, generation) index locked that
    index's entry before the row, the reverse of a write by id. Where SELECT ... FOR
    UPDATE does not exist (SQLite) the writer already holds the database's one write
    lock, and nothing is sent."""
    if connection.dialect.name != "sqlite":
        connection.execute(_LOCK_NODES, {"node_ids": sorted(node_ids)}).all()


def _bump(connection, node_ids):
    connection.execute(
        NODES.update().where(NODES.c.id.in_(node_ids)).values(generation=NODES.c.generation + 1)
    )
