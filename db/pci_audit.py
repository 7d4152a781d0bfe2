"""Queries that find PCI device rows the tracker's invariants forbid.

They read the tables directly (SQLAlchemy Core), not through the objects, so that
``pcisim-status upgrade check`` can run them on the data of the release before this
one. Each returns the rows it found, oldest first; none means nothing was found.
"""

import collections

import sqlalchemy as sa

from pcisim.db import allocations, models
from pcisim.db.engine import reader

DEVICES = models.PciDevice.__table__
INSTANCES = models.Instance.__table__
NODES = models.ComputeNode.__table__
# What names a device: a row without any of them cannot be matched to the hypervisor's
# report, nor saved by the tracker (Nova bug 1899541 left such rows behind).
IDENTITY = ("compute_node_id", "address", "vendor_id", "product_id", "dev_type")
HELD = ("claimed", "allocated")
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


@reader
def blank_devices(context, host=None):
    """Live device rows missing an identity field (NULL, or empty where the schema
    forbids NULL)."""
    return _found(context, sa.or_(*(_blank(DEVICES.c[name]) for name in IDENTITY)), host)


@reader
def devices_held_by_missing_instances(context, host=None):
    """Live devices claimed or allocated for no instance, or for one without a live
    row (deleted, archived, never created)."""
    live = sa.select(INSTANCES.c.uuid).where(INSTANCES.c.deleted == 0)
    held = sa.and_(
        DEVICES.c.status.in_(HELD),
        sa.or_(DEVICES.c.instance_uuid.is_(None), DEVICES.c.instance_uuid.not_in(live)),
    )
    return _found(context, held, host)


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
