"""UPDATE statements of one live row by its key, built once per set of columns.

An UPDATE built around the caller's values is a new statement at every call, and
SQLAlchemy computes its cache key again, walking each value's bind parameter and
type: for a compute node's save that cost more than SQLite's run of the statement.
Built with bind parameters instead, the statement of a set of columns is the same
object at every call, its cache key computed once and its compiled form found by it.
"""

import functools

import sqlalchemy as sa

from pcisim.db import models

# Columns whose change changes what the scheduler may allocate of a node.
NODE_INVENTORY = frozenset({"vcpus", "memory_mb", "local_gb", "pci_inventory"})


def _new(table, column):
    return sa.bindparam(f"new_{column}", type_=table.c[column].type)


def parameters(key, values, now):
    """The parameters of a statement of this module: the row's ``key``, its new
    ``values`` and ``now`` for its ``updated_at``."""
    params = {f"new_{column}": value for column, value in values.items()}
    params["new_updated_at"] = now
    params["key"] = key
    return params


@functools.lru_cache(maxsize=64)
def compute_node(columns):
    """Set ``columns`` (a sorted tuple) and ``updated_at`` of the live node whose id is
    the parameter ``key``. A change of its inventory bumps its generation, so that an
    allocation chosen from the old inventory is refused."""
    table = models.ComputeNode.__table__
    new = {column: _new(table, column) for column in (*columns, "updated_at")}
    assignments = [(table.c[column], new[column]) for column in (*columns, "updated_at")]
    inventory = [
        table.c[column].is_distinct_from(new[column])
        for column in columns
        if column in NODE_INVENTORY
    ]
    if inventory:
        # NOTE: first, as MySQL and MariaDB assign from left to right, each assignment
        # seeing the columns that the ones before it set.
        bump = sa.case((sa.or_(*inventory), 1), else_=0)
        assignments.insert(0, (table.c.generation, table.c.generation + bump))
    return (
        sa.update(table)
        .where(table.c.id == sa.bindparam("key"), table.c.deleted == 0)
        .ordered_values(*assignments)
    )


@functools.lru_cache(maxsize=64)
def instance(columns):
    """Set ``columns`` (a sorted tuple) and ``updated_at`` of the live instance whose
    uuid is the parameter ``key``."""
    table = models.Instance.__table__
    return (
        sa.update(table)
        .where(table.c.uuid == sa.bindparam("key"), table.c.deleted == 0)
        .values({column: _new(table, column) for column in (*columns, "updated_at")})
    )
