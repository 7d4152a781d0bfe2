"""Queries that find PCI records the tracker's invariants forbid, and the guarded
writes that mend some of them.

They read the tables directly (SQLAlchemy Core), not through the objects, so that
``pcisim-status upgrade check`` can run them on the data of the release before this
one. Each query returns the rows it found, oldest first; none means nothing was found.
Each write is one transaction that re-checks, in its own statement, what the audit
found, and changes nothing (returning False) when a live writer changed it meanwhile.
"""

import collections

import sqlalchemy as sa
from oslo_utils import timeutils

from pcisim.db import allocations, models
from pcisim.db.engine import reader, writer

DEVICES = models.PciDevice.__table__
INSTANCES = models.Instance.__table__
NODES = models.ComputeNode.__table__
EXTRAS = models.InstanceExtra.__table__
ALLOCATIONS = models.Allocation.__table__
# What names a device: a row without any of them cannot be matched to the hypervisor's
# report, nor saved by the tracker (Nova bug 1899541 left such rows behind).
IDENTITY = ("compute_node_id", "address", "vendor_id", "product_id", "dev_type")
HELD = allocations.HELD
SRIOV_TYPES = ("type-PF", "type-VF")
FOUND_COLUMNS = (
    DEVICES.c.id,
    DEVICES.c.compute_node_id,
    DEVICES.c.address,
    DEVICES.c.vendor_id,
    DEVICES.c.product_id,
    DEVICES.c.dev_type,
    DEVICES.c.parent_addr,
    DEVICES.c.status,
    DEVICES.c.instance_uuid,
    NODES.c.host,
    NODES.c.hypervisor_hostname,
)


def _found(context, where, host):
    """Live device rows matching ``where`` (of the nodes of ``host`` when given), with
    their node's host and name (None for a row without a node)."""
    query = (
        sa.select(*FOUND_COLUMNS)
        .select_from(DEVICES.outerjoin(NODES, NODES.c.id == DEVICES.c.compute_node_id))
        .where(DEVICES.c.deleted == 0, where)
        .order_by(DEVICES.c.compute_node_id, DEVICES.c.address, DEVICES.c.id)
    )
    if host is not None:
        query = query.where(NODES.c.host == host)
    return list(context.session.connection().execute(query))


def _blank(column):
    if isinstance(column.type, sa.String):
        return sa.or_(column.is_(None), column == "")
    return column.is_(None)


def _missing_identity():
    return sa.or_(*(_blank(DEVICES.c[name]) for name in IDENTITY))


def _live_instance_uuids():
    return sa.select(INSTANCES.c.uuid).where(INSTANCES.c.deleted == 0)


@reader
def blank_devices(context, host=None):
    """Live device rows missing an identity field (NULL, or empty where the schema
    forbids NULL)."""
    return _found(context, _missing_identity(), host)


@reader
def devices_held_by_missing_instances(context, host=None):
    """Live devices claimed or allocated for no instance, or for one without a live
    row (deleted, archived, never created)."""
    held = sa.and_(
        DEVICES.c.status.in_(HELD),
        sa.or_(
            DEVICES.c.instance_uuid.is_(None),
            DEVICES.c.instance_uuid.not_in(_live_instance_uuids()),
        ),
    )
    return _found(context, held, host)


@reader
def devices_held_by_live_instances(context, host=None):
    """Live devices claimed or allocated for a live instance, each with its request
    id and NUMA node, and its holder's host, node, vm_state and PCI requests (JSON)."""
    holder = sa.and_(INSTANCES.c.uuid == DEVICES.c.instance_uuid, INSTANCES.c.deleted == 0)
    extra = sa.and_(EXTRAS.c.instance_uuid == INSTANCES.c.uuid, EXTRAS.c.deleted == 0)
    query = (
        sa.select(
            *FOUND_COLUMNS,
            DEVICES.c.request_id,
            DEVICES.c.numa_node,
            INSTANCES.c.host.label("holder_host"),
            INSTANCES.c.node.label("holder_node"),
            INSTANCES.c.vm_state,
            EXTRAS.c.pci_requests,
        )
        .select_from(
            DEVICES.join(NODES, NODES.c.id == DEVICES.c.compute_node_id)
            .join(INSTANCES, holder)
            .outerjoin(EXTRAS, extra)
        )
        .where(DEVICES.c.deleted == 0, DEVICES.c.status.in_(HELD))
        .order_by(DEVICES.c.compute_node_id, DEVICES.c.address)
    )
    if host is not None:
        query = query.where(NODES.c.host == host)
    return list(context.session.connection().execute(query))


@reader
def allocations_on_live_nodes(context, host=None):
    """Rows (compute_node_id, consumer_uuid, resource, used) of the allocations on
    live nodes."""
    query = (
        sa.select(
            ALLOCATIONS.c.compute_node_id,
            ALLOCATIONS.c.consumer_uuid,
            ALLOCATIONS.c.resource,
            ALLOCATIONS.c.used,
        )
        .join(NODES, NODES.c.id == ALLOCATIONS.c.compute_node_id)
        .where(NODES.c.deleted == 0)
    )
    if host is not None:
        query = query.where(NODES.c.host == host)
    return list(context.session.connection().execute(query))


@reader
def live_nodes(context, host=None):
    """Rows (id, host, hypervisor_hostname, pci_stats, pci_inventory) of the live
    nodes, by id."""
    query = (
        sa.select(
            NODES.c.id,
            NODES.c.host,
            NODES.c.hypervisor_hostname,
            NODES.c.pci_stats,
            NODES.c.pci_inventory,
        )
        .where(NODES.c.deleted == 0)
        .order_by(NODES.c.id)
    )
    if host is not None:
        query = query.where(NODES.c.host == host)
    return list(context.session.connection().execute(query))


@reader
def sriov_devices(context, host=None):
    """Live PF and VF rows, whose statuses depend on one another."""
    return _found(context, DEVICES.c.dev_type.in_(SRIOV_TYPES), host)


@reader
def orphaned_allocations(context, host=None):
    """``allocations.orphaned`` (allocations no flow will release), each as a row of
    compute_node_id, host, hypervisor_hostname and consumer_uuid."""
    orphans = allocations.orphaned(context)
    names = sa.select(NODES.c.id, NODES.c.host, NODES.c.hypervisor_hostname).where(
        NODES.c.id.in_({node_id for node_id, _ in orphans})
    )
    nodes = {row.id: row for row in context.session.connection().execute(names)}
    return [
        _Allocation(node_id, nodes[node_id].host, nodes[node_id].hypervisor_hostname, consumer)
        for node_id, consumer in orphans
        if host is None or nodes[node_id].host == host
    ]


class _Allocation(
    collections.namedtuple("_Allocation", "compute_node_id host hypervisor_hostname consumer_uuid")
):
    """An orphaned allocation of a node."""


@reader
def device_holders(context, node_id):
    """{address: (status, instance_uuid)} of the node's live device rows."""
    return _holders(context.session.connection(), node_id)


@writer
def lock_device_holders(context, node_id):
    """``device_holders``, its rows locked until the caller's transaction ends."""
    return _holders(context.session.connection(), node_id, lock=True)


def _holders(connection, node_id, lock=False):
    query = sa.select(DEVICES.c.address, DEVICES.c.status, DEVICES.c.instance_uuid).where(
        DEVICES.c.compute_node_id == node_id, DEVICES.c.deleted == 0
    )
    if lock:
        query = query.order_by(DEVICES.c.address).with_for_update()
    return {address: (status, holder) for address, status, holder in connection.execute(query)}


@writer
def delete_unreportable_blank_device(context, device_id, dry_run=False):
    """Soft-delete the device row ``device_id`` if it still misses an identity field,
    no live node could report it (it has no live node, or no address to match a report
    by) and no live instance holds it; whether it did (``dry_run``: would)."""
    live_node = sa.select(NODES.c.id).where(NODES.c.deleted == 0)
    unreportable = sa.or_(
        DEVICES.c.compute_node_id.is_(None),
        DEVICES.c.compute_node_id.not_in(live_node),
        _blank(DEVICES.c.address),
    )
    held_by_live = sa.and_(
        DEVICES.c.status.in_(HELD), DEVICES.c.instance_uuid.in_(_live_instance_uuids())
    )
    where = (
        DEVICES.c.id == device_id,
        DEVICES.c.deleted == 0,
        _missing_identity(),
        unreportable,
        sa.not_(held_by_live),
    )
    values = {"deleted": DEVICES.c.id, "deleted_at": timeutils.utcnow()}
    return _changes_one(context, DEVICES, where, values, dry_run)


@writer
def swap_node_pools(context, node_id, read, pools, dry_run=False):
    """Write node ``node_id``'s ``pci_stats`` and ``pci_inventory`` as ``pools`` (a
    dict of their JSON texts) if they still are ``read`` (as read), moving its
    generation; whether it did (``dry_run``: would)."""
    unchanged = [
        NODES.c[column].is_(None) if text is None else NODES.c[column] == text
        for column, text in read.items()
    ]
    where = (NODES.c.id == node_id, NODES.c.deleted == 0, *unchanged)
    values = {"generation": NODES.c.generation + 1, **pools}
    return _changes_one(context, NODES, where, values, dry_run)


def _changes_one(context, table, where, values, dry_run):
    """Update the one row of ``table`` matching ``where`` (or, ``dry_run``, count it);
    whether there was one."""
    connection = context.session.connection()
    if dry_run:
        matching = sa.select(sa.func.count()).select_from(table).where(*where)
        return connection.execute(matching).scalar_one() == 1
    return connection.execute(table.update().where(*where).values(values)).rowcount == 1
