"""Archive soft-deleted rows into shadow tables, and purge the shadow tables.

What moves is decided by foreign keys, never by column names. A soft-deleted row is a
*root*; it moves together with its *tree*: every row whose foreign key names it, and
theirs in turn (an instance takes its extra, its faults, its actions and their
events). A row outside any deleted tree stays, whatever it references.

``pci_devices`` is the case this rule exists for. Its ``instance_uuid`` records which
instance holds a device and has no foreign key, so a device row is archived only when
it is itself soft-deleted (the compute node freed and removed it) or its compute node
is. Nova once archived device rows because their ``instance_uuid`` named a deleted
instance, and the compute then failed on every periodic update (bug 1899541).

Trees are atomic: a transaction moves whole trees only, and ``max_rows`` is a budget
for a whole call that never splits one. A tree larger than the whole budget is still
moved when it is the first of the call, so that archiving always makes progress.
"""

import dataclasses
import itertools

import sqlalchemy as sa
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc

from db import models
from db.engine import writer
from pcisim import exception

ROWS_PER_TRANSACTION = 1000
IDS_PER_STATEMENT = 500


@dataclasses.dataclass
class ArchiveResult:
    """Rows moved per live table, and the uuids of the instances archived."""

    rows: dict = dataclasses.field(default_factory=dict)
    instance_uuids: list = dataclasses.field(default_factory=list)

    @property
    def total(self):
        return sum(self.rows.values())

    def add(self, other):
        for table, count in other.rows.items():
            self.rows[table] = self.rows.get(table, 0) + count
        self.instance_uuids.extend(other.instance_uuids)


@dataclasses.dataclass(frozen=True)
class _Edge:
    """A foreign key read as ownership: ``parent.key`` owns ``child`` rows via ``fk``."""

    child: sa.Table
    fk: sa.Column
    key: sa.Column


def owned_edges(table):
    """The foreign keys by which rows of ``table`` own rows of other live tables."""
    return [
        _Edge(child=child, fk=fk.parent, key=fk.column)
        for child in models.LIVE_TABLES
        for fk in child.foreign_keys
        if fk.column.table is table
    ]


def archive_deleted_rows(context, max_rows=1000, before=None):
    """Move up to ``max_rows`` rows of soft-deleted trees into the shadow tables.

    ``before`` (a naive UTC datetime) limits the roots to rows deleted before it.
    Returns an ``ArchiveResult``; an empty one means nothing was left to archive.
    Raises ``InvalidArchiveBudget`` for a budget that is not a positive integer.
    """
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise exception.InvalidArchiveBudget(max_rows=max_rows)
    result = ArchiveResult()
    for table in models.LIVE_TABLES:
        while result.total < max_rows:
            batch = _archive_batch(
                context, table, max_rows - result.total, before, first=result.total == 0
            )
            if not batch.total:
                break
            result.add(batch)
    return result


@oslo_db_api.wrap_db_retry(
    max_retries=5,
    retry_on_deadlock=True,
    exception_checker=lambda error: isinstance(error, db_exc.DBReferenceError),
)
@writer
def _archive_batch(context, table, budget, before, first):
    """Move, in one transaction, the next whole trees rooted in ``table`` that fit.

    A row added to a tree while this runs makes the parent's delete fail its foreign
    key; the transaction then rolls back and is retried.
    """
    roots = _deleted_roots(context, table, min(budget, ROWS_PER_TRANSACTION), before)
    trees = _trees(context, table, roots)
    chosen = _fitting(roots, trees, min(budget, ROWS_PER_TRANSACTION), first)
    rows = {t: [i for i, root in ids.items() if root in chosen] for t, ids in trees.items()}
    _move(context, table, rows)
    batch = ArchiveResult(rows={t.name: len(ids) for t, ids in rows.items() if ids})
    if table.name == "instances" and chosen:
        batch.instance_uuids = _uuids(context, models.shadow_of(table), rows[table])
    return batch


def _deleted_roots(context, table, limit, before):
    query = sa.select(table.c.id).where(table.c.deleted != 0).order_by(table.c.id).limit(limit)
    if before is not None:
        query = query.where(table.c.deleted_at < before)
    return list(context.session.scalars(query))


def _trees(context, table, roots):
    """Every row of the trees of ``roots``: table -> {row id: root id}."""
    trees = {table: {root: root for root in roots}}
    pending = [table]
    while pending:
        parent = pending.pop()
        for edge in owned_edges(parent):
            trees.setdefault(edge.child, {}).update(_children(context, edge, trees[parent]))
            pending.append(edge.child)
    return trees


def _children(context, edge, parent_roots):
    """Rows of ``edge.child`` owned by the given parent rows: {child id: root id}."""
    parent = edge.key.table
    children = {}
    for ids in _chunked(parent_roots):
        query = (
            sa.select(edge.child.c.id, parent.c.id)
            .join(parent, edge.fk == edge.key)
            .where(parent.c.id.in_(ids))
        )
        for child_id, parent_id in context.session.execute(query):
            children[child_id] = parent_roots[parent_id]
    return children


def _fitting(roots, trees, budget, first):
    sizes = dict.fromkeys(roots, 0)
    for ids in trees.values():
        for root in ids.values():
            sizes[root] += 1
    chosen, used = set(), 0
    for root in roots:
        if used + sizes[root] > budget and not (first and not chosen):
            break
        chosen.add(root)
        used += sizes[root]
    return chosen


def _move(context, root_table, rows):
    """Copy the rows into the shadows top-down, then delete them bottom-up."""
    _copy(context, root_table, rows[root_table])
    for parent in rows:
        for edge in owned_edges(parent):
            _copy_owned(context, edge, rows[edge.child], rows[parent])
    for table in reversed(list(rows)):
        for ids in _chunked(rows[table]):
            context.session.execute(sa.delete(table).where(table.c.id.in_(ids)))


def _copy(context, table, ids):
    shadow = models.shadow_of(table)
    for chunk in _chunked(ids):
        select = sa.select(*table.c).where(table.c.id.in_(chunk))
        context.session.execute(sa.insert(shadow).from_select(list(table.c.keys()), select))


def _copy_owned(context, edge, ids, parent_ids):
    """Copy owned rows, marking each deleted when and as its already-copied parent was."""
    child, parent_shadow = edge.child, models.shadow_of(edge.key.table)
    shadow_key = parent_shadow.c[edge.key.name]
    columns = [_owned_column(child, parent_shadow, name) for name in child.c.keys()]
    for chunk, parents in itertools.product(_chunked(ids), _chunked(parent_ids)):
        select = (
            sa.select(*columns)
            .join(parent_shadow, shadow_key == edge.fk)
            .where(child.c.id.in_(chunk), parent_shadow.c.id.in_(parents))
        )
        shadow = models.shadow_of(child)
        context.session.execute(sa.insert(shadow).from_select(list(child.c.keys()), select))


def _owned_column(child, parent_shadow, name):
    if name == "deleted":
        return sa.case((child.c.deleted == 0, child.c.id), else_=child.c.deleted)
    if name == "deleted_at":
        return sa.func.coalesce(child.c.deleted_at, parent_shadow.c.deleted_at)
    return child.c[name]


def _uuids(context, shadow, ids):
    uuids = []
    for chunk in _chunked(ids):
        query = sa.select(shadow.c.uuid).where(shadow.c.id.in_(chunk)).order_by(shadow.c.id)
        uuids.extend(context.session.scalars(query))
    return uuids


def _chunked(ids):
    ids = list(ids)
    return [ids[i : i + IDS_PER_STATEMENT] for i in range(0, len(ids), IDS_PER_STATEMENT)]


@writer
def purge_shadow_tables(context, before=None):
    """Delete shadow rows deleted before ``before`` (all rows when None).

    Returns rows deleted per shadow table, leaving out tables with none.
    """
    purged = {}
    for table in models.LIVE_TABLES:
        shadow = models.shadow_of(table)
        statement = sa.delete(shadow)
        if before is not None:
            statement = statement.where(shadow.c.deleted_at < before)
        count = context.session.execute(statement).rowcount
        if count:
            purged[shadow.name] = count
    return purged
