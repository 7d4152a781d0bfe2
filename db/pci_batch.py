"""The SQL of every PCI device write: SQLAlchemy Core statements, no ORM.

A tracker saves once per instance boot or delete, so this path is paid per request.
The ORM spent most of a save building queries, tracking objects and flushing (about
1.9 ms of which SQLite took 0.5 ms); here each changed device is one compiled,
cached UPDATE, and nothing is read back: the caller knows the rows it wrote.

Every write of an existing device, ``pci_device_update`` and ``pci_device_destroy``
as much as each device of ``pci_device_batch_save``, is a ``DeviceWrite`` run by
``write_devices``: the one conditional UPDATE of ``device_update``, which matches the
device's live row only, and, when its writer states the holder it believes the row
has, only while the row holds that holder or already the one written (a retry of a
write that landed). Its row count says whether it was written; only when one matched
nothing does one locking SELECT tell a missing row from a conflicting one. Rows are
written in address order, so that two writers of a node lock them in the same order.
"""

import dataclasses
import datetime
import functools
import itertools

import sqlalchemy as sa
from oslo_db import exception as db_exc

from pcisim import exception
from pcisim.db import models

DEVICES = models.PciDevice.__table__
HOLDER_FIELDS = ("status", "instance_uuid")
# What a soft delete sets, as ``Base.soft_delete`` does: ``deleted`` takes the id.
_SOFT_DELETE = {"status": "deleted", "deleted": DEVICES.c.id, "deleted_at": sa.bindparam("w_now")}


@functools.cache
def device_update(columns, guarded):
    """The conditional UPDATE of one device's live row, compiled once per shape.

    UPDATE pci_devices SET <column> = :v_<column>, ..., updated_at = :w_now
    WHERE compute_node_id = :w_node_id AND address = :w_address AND deleted = 0
      [AND (status, instance_uuid) holds :believed_* OR :wanted_*, when ``guarded``]

    ``columns`` is a sorted tuple of the columns to set, or None to soft-delete the
    row instead. It never inserts: a row that does not match is simply not written.
    """
    where = [
        DEVICES.c.compute_node_id == sa.bindparam("w_node_id"),
        DEVICES.c.address == sa.bindparam("w_address"),
        DEVICES.c.deleted == 0,
    ]
    if guarded:
        holds = [
            sa.and_(
                DEVICES.c.status == sa.bindparam(f"{holder}_status"),
                DEVICES.c.instance_uuid.is_not_distinct_from(
                    sa.bindparam(f"{holder}_instance_uuid")
                ),
            )
            for holder in ("believed", "wanted")
        ]
        where.append(sa.or_(*holds))
    if columns is None:
        values = _SOFT_DELETE
    else:
        values = {name: sa.bindparam(f"v_{name}") for name in columns}
    return sa.update(DEVICES).where(*where).values(**values, updated_at=sa.bindparam("w_now"))


def _holder_of(values):
    return {name: values[name] for name in HOLDER_FIELDS}


@dataclasses.dataclass(frozen=True)
class DeviceWrite:
    """The write of the existing device at (``node_id``, ``address``) at time ``now``.

    ``values`` are the column values to set, or None to soft-delete the row.
    ``expected`` is the holder (``status`` and ``instance_uuid``) the writer believes
    the row holds, or None to write it whatever it holds.
    """

    node_id: int
    address: str
    values: dict | None
    now: datetime.datetime
    expected: dict | None = None

    @property
    def kind(self):
        """How ``pci_device_batch_save`` reports it: "updated" or "destroyed"."""
        return "destroyed" if self.values is None else "updated"

    @property
    def stored(self):
        """The column values it sets (``deleted`` given as True)."""
        if self.values is None:
            stored = {"status": "deleted", "deleted": True, "deleted_at": self.now}
        else:
            stored = dict(self.values)
        return {**stored, "updated_at": self.now}

    @property
    def accepted(self):
        """The holders the row may hold for it to be written: the believed one and
        the one written; None when the writer states no belief."""
        if self.expected is None:
            return None
        return _holder_of(self.expected), _holder_of({**self.expected, **(self.values or {})})

    @property
    def statement(self):
        columns = None if self.values is None else tuple(sorted(self.values))
        return device_update(columns, self.expected is not None)

    @property
    def params(self):
        params = {"w_node_id": self.node_id, "w_address": self.address, "w_now": self.now}
        params.update({f"v_{name}": value for name, value in (self.values or {}).items()})
        if self.expected is not None:
            for prefix, holder in zip(("believed", "wanted"), self.accepted, strict=True):
                params.update({f"{prefix}_{name}": value for name, value in holder.items()})
        return params


def write_devices(connection, writes):
    """Run ``writes`` of one node in address order; the addresses with no live row.

    Raises ``PciDeviceConflict`` when a row holds neither the holder its writer
    believes nor the one it writes; the caller's transaction must then roll back.
    """
    writes = sorted(writes, key=lambda write: write.address)
    unmatched = []
    for statement, group in itertools.groupby(writes, key=lambda write: write.statement):
        unmatched += _unmatched(connection, statement, list(group))
    return _missing(connection, unmatched)


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


def _missing(connection, unmatched):
    """The addresses of ``unmatched`` writes that have no live row.

    A guarded write may have missed a live row that holds another holder: a conflict.
    Its row is read locked, so that what it holds stays as read; if it holds an
    accepted holder by now (another writer changed it in between), it is written.
    """
    guarded = [write for write in unmatched if write.expected is not None]
    if not guarded:
        return [write.address for write in unmatched]
    node_id = guarded[0].node_id
    holders = _locked_holders(connection, node_id, [write.address for write in guarded])
    conflicts = {
        write.address: f"expected {_holder(write.expected)}, found {_holder(found)}"
        for write in guarded
        if (found := holders.get(write.address)) and found not in write.accepted
    }
    if conflicts:
        details = "; ".join(f"{address}: {what}" for address, what in sorted(conflicts.items()))
        raise exception.PciDeviceConflict(
            node_id=node_id, addresses=sorted(conflicts), details=details
        )
    for write in guarded:
        if write.address in holders:
            connection.execute(write.statement, write.params)
    return sorted({write.address for write in unmatched} - set(holders))


def _locked_holders(connection, node_id, addresses):
    """The holder of each live row at ``addresses``, by address, locked for update."""
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


def _holder(values):
    holder = values["instance_uuid"]
    return values["status"] + (f" by {holder}" if holder else "")


def insert_devices(connection, node_id, create, now):
    """Insert new devices in bulk; each new row's column values by address, id included.

    ``PciDeviceExists`` when one has a live twin, ``ComputeNodeNotFound`` when the node
    does not exist.
    """
    if not create:
        return {}
    # NOTE: only the columns some new device sets are written (one executemany needs
    # the same keys in every row); the others take their NULL.
    given = dict.fromkeys(itertools.chain.from_iterable(create))
    rows = [
        {**given, **values, "compute_node_id": node_id, "created_at": now, "deleted": 0}
        for values in create
    ]
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
