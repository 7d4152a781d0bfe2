"""The SQL of ``pci_device_batch_save``: SQLAlchemy Core statements, no ORM.

A tracker saves once per instance boot or delete, so this path is paid per request.
The ORM spent most of a save building queries, tracking objects and flushing (about
1.9 ms of which SQLite took 0.5 ms); here each changed device is one compiled,
cached UPDATE, and nothing is read back: the caller knows the rows it wrote.

Each device to update or soft-delete is one UPDATE of its live row that matches only
while the row holds what the writer believes it holds, or already what it writes (a
retry of a write that landed). Its row count says whether it was written; only when
one matched nothing does one locking SELECT tell a missing row from a conflicting one.
Rows are written in address order, so that two writers of a node lock them in the
same order, as the locking read they replace did.
"""

import dataclasses
import functools
import itertools

import sqlalchemy as sa
from oslo_db import exception as db_exc

from pcisim import exception
from pcisim.db import models

DEVICES = models.PciDevice.__table__
HOLDER_FIELDS = ("status", "instance_uuid")
_INSERTED_COLUMNS = tuple(name for name in DEVICES.columns.keys() if name != "id")


@dataclasses.dataclass(frozen=True)
class RowWrite:
    """One device's UPDATE: ``kind`` is "updated" or "destroyed", ``stored`` the
    column values it sets, ``believed`` and ``wanted`` the holders it accepts."""

    kind: str
    address: str
    statement: sa.Update
    params: dict
    stored: dict
    believed: dict | None = None
    wanted: dict | None = None


def row_writes(node_id, update, destroy, expected, now):
    """The UPDATEs that apply ``update`` and soft-delete ``destroy``, in address order."""
    writes = [
        _row_write(node_id, address, values, update, expected, now)
        for address, values in update.items()
    ]
    writes += [_row_write(node_id, address, None, update, expected, now) for address in destroy]
    return sorted(writes, key=lambda write: write.address)


def _row_write(node_id, address, values, update, expected, now):
    """The UPDATE of one address: ``values`` to set, or None to soft-delete its row."""
    params = {"w_node_id": node_id, "w_address": address, "w_now": now}
    believed, wanted = _accepted_holders(address, update, expected)
    guarded = believed is not None
    if guarded:
        params.update(_holder_params("believed", believed), **_holder_params("wanted", wanted))
    if values is None:
        kind, statement = "destroyed", _soft_delete(guarded)
        stored = {"status": "deleted", "deleted": True, "deleted_at": now, "updated_at": now}
    else:
        kind, statement = "updated", _update(tuple(sorted(values)), guarded)
        params.update({f"v_{name}": value for name, value in values.items()})
        stored = {**values, "updated_at": now}
    return RowWrite(kind, address, statement, params, stored, believed, wanted)


def _accepted_holders(address, update, expected):
    """The holders a write of ``address`` accepts: the one its writer believes the row
    holds, and the one it writes; (None, None) when the writer states no belief."""
    believed = expected.get(address)
    if believed is None:
        return None, None
    wanted = {**believed, **update.get(address, {})}
    return _holder_of(believed), _holder_of(wanted)


def _holder_of(values):
    return {name: values[name] for name in HOLDER_FIELDS}


def _holder_params(prefix, holder):
    return {f"{prefix}_{name}": value for name, value in holder.items()}


def _live_row(guarded):
    """The live row at (:w_node_id, :w_address); when ``guarded``, only while it holds
    the :believed_* or the :wanted_* holder."""
    where = [
        DEVICES.c.compute_node_id == sa.bindparam("w_node_id"),
        DEVICES.c.address == sa.bindparam("w_address"),
        DEVICES.c.deleted == 0,
    ]
    if guarded:
        where.append(sa.or_(_holds("believed"), _holds("wanted")))
    return where


def _holds(prefix):
    return sa.and_(
        DEVICES.c.status == sa.bindparam(f"{prefix}_status"),
        DEVICES.c.instance_uuid.is_not_distinct_from(sa.bindparam(f"{prefix}_instance_uuid")),
    )


@functools.cache
def _update(columns, guarded):
    """Set ``columns`` (from :v_<column>) and updated_at on one live row."""
    values = {name: sa.bindparam(f"v_{name}") for name in columns}
    return (
        sa.update(DEVICES)
        .where(*_live_row(guarded))
        .values(**values, updated_at=sa.bindparam("w_now"))
    )


@functools.cache
def _soft_delete(guarded):
    """Soft-delete one live row as ``Base.soft_delete`` does, status ``deleted``."""
    return (
        sa.update(DEVICES)
        .where(*_live_row(guarded))
        .values(
            status="deleted",
            deleted=DEVICES.c.id,
            deleted_at=sa.bindparam("w_now"),
            updated_at=sa.bindparam("w_now"),
        )
    )


def write_rows(connection, node_id, writes):
    """Run ``writes``; return the addresses that have no live row.

    Raises ``PciDeviceConflict`` when a row holds neither the holder its writer
    believes nor the one it writes; the caller's transaction must then roll back.
    """
    unmatched = []
    for statement, group in itertools.groupby(writes, key=lambda write: write.statement):
        unmatched += _unmatched(connection, statement, list(group))
    return _missing(connection, node_id, unmatched)


def _unmatched(connection, statement, writes):
    """Those of ``writes`` (all of ``statement``) whose UPDATE matched no row."""
    if len(writes) > 1 and connection.dialect.supports_sane_multi_rowcount:
        # NOTE: a short total row count of an executemany does not say which rows it
        # missed; undo the group and write it row by row to learn which (rare).
        with connection.begin_nested() as savepoint:
            written = connection.execute(statement, [write.params for write in writes])
            if written.rowcount == len(writes):
                return []
            savepoint.rollback()
    return [write for write in writes if connection.execute(statement, write.params).rowcount == 0]


def _missing(connection, node_id, unmatched):
    """The addresses of ``unmatched`` writes that have no live row.

    A guarded write may have missed a live row that holds another holder: a conflict.
    Its row is read locked, so that what it holds stays as read; if it holds an
    accepted holder by now (another writer changed it in between), it is written.
    """
    guarded = [write for write in unmatched if write.believed is not None]
    holders = _locked_holders(connection, node_id, [write.address for write in guarded])
    _raise_conflicts(node_id, guarded, holders)
    for write in guarded:
        if write.address in holders:
            connection.execute(write.statement, write.params)
    return sorted({write.address for write in unmatched} - set(holders))


def _locked_holders(connection, node_id, addresses):
    """The holder of each live row at ``addresses``, by address, locked for update."""
    if not addresses:
        return {}
    query = (
        sa.select(DEVICES.c.address, *(DEVICES.c[name] for name in HOLDER_FIELDS))
        .where(
            DEVICES.c.compute_node_id == node_id,
            DEVICES.c.deleted == 0,
            DEVICES.c.address.in_(addresses),
        )
        .with_for_update()
    )
    return {row["address"]: _holder_of(row) for row in connection.execute(query).mappings()}


def _raise_conflicts(node_id, writes, holders):
    conflicts = {
        write.address: f"expected {_holder(write.believed)}, found {_holder(found)}"
        for write in writes
        if (found := holders.get(write.address)) and found not in (write.believed, write.wanted)
    }
    if conflicts:
        details = "; ".join(f"{address}: {what}" for address, what in sorted(conflicts.items()))
        raise exception.PciDeviceConflict(
            node_id=node_id, addresses=sorted(conflicts), details=details
        )


def _holder(values):
    holder = values["instance_uuid"]
    return values["status"] + (f" by {holder}" if holder else "")


def insert_devices(connection, node_id, create, now):
    """Insert new devices in bulk; each new row's column values by address, id included.

    ``PciDeviceExists`` when one has a live twin, ``ComputeNodeNotFound`` when the node
    does not exist.
    """
    rows = [
        {
            **dict.fromkeys(_INSERTED_COLUMNS),
            **values,
            "compute_node_id": node_id,
            "created_at": now,
            "deleted": 0,
        }
        for values in create
    ]
    if not rows:
        return {}
    try:
        ids = _insert(connection, node_id, rows)
    except db_exc.DBDuplicateEntry:
        addresses = ", ".join(row["address"] for row in rows)
        raise exception.PciDeviceExists(node_id=node_id, address=addresses)
    except db_exc.DBReferenceError:
        raise exception.ComputeNodeNotFound(node_id=node_id)
    return {row["address"]: {**row, "id": ids[row["address"]]} for row in rows}


def _insert(connection, node_id, rows):
    """Insert ``rows``; the new ids by address."""
    dialect = connection.dialect
    if dialect.insert_executemany_returning if len(rows) > 1 else dialect.insert_returning:
        inserted = connection.execute(
            sa.insert(DEVICES).returning(DEVICES.c.address, DEVICES.c.id), rows
        )
        return dict(inserted.all())
    connection.execute(sa.insert(DEVICES), rows)
    query = sa.select(DEVICES.c.address, DEVICES.c.id).where(
        DEVICES.c.compute_node_id == node_id,
        DEVICES.c.deleted == 0,
        DEVICES.c.address.in_([row["address"] for row in rows]),
    )
    return dict(connection.execute(query).all())
