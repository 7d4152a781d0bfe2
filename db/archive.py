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
moved when it is the first of the call, so that archiving always makes progress. A
call ends at the first tree that does not fit what is left of its budget.

Cost: a transaction reads the ids of the trees it considers (a page of roots at a
time, sized so that few trees are read and left behind), then copies and deletes
them with one statement per table and per ``IDS_PER_STATEMENT`` ids; its statements
are built once and cached. ``bench/archive.py`` measures it against raw SQL.
"""

import dataclasses
import functools

import sqlalchemy as sa
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc

from pcisim import exception
from pcisim.db import models
from pcisim.db.engine import writer

ROWS_PER_TRANSACTION = 1000
# NOTE: the largest budget nova-manage accepts (a signed 32-bit integer).
MAX_ROWS = 2**31 - 1
IDS_PER_STATEMENT = 500
IDS = "ids"


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


@dataclasses.dataclass(frozen=True, eq=False)
class _Edge:
    """A foreign key read as ownership: ``parent.key`` owns ``child`` rows via ``fk``."""

    child: sa.Table
    fk: sa.Column
    key: sa.Column

    @property
    def parent(self):
        return self.key.table


@functools.cache
def owned_edges(table):
    """The foreign keys by which rows of ``table`` own rows of other live tables."""
    return tuple(
        _Edge(child=child, fk=fk.parent, key=fk.column)
        for child in models.LIVE_TABLES
        for fk in child.foreign_keys
        if fk.column.table is table
    )


@functools.cache
def tree_tables(table):
    """``table`` and every table its rows own rows of, each parent before its children."""
    tables = [table]
    for parent in tables:
        tables += [edge.child for edge in owned_edges(parent) if edge.child not in tables]
    return tuple(tables)


def archive_deleted_rows(context, max_rows=1000, before=None):
    """Move up to ``max_rows`` rows of soft-deleted trees into the shadow tables.

    ``before`` (a naive UTC datetime) limits the roots to rows deleted before it.
    Returns an ``ArchiveResult``; an empty one means nothing was left to archive.
    Raises ``InvalidArchiveBudget`` for a budget that is not an integer from 1 to
    ``MAX_ROWS``.
    """
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= MAX_ROWS:
        raise exception.InvalidArchiveBudget(max_rows=max_rows)
    result = ArchiveResult()
    for table in models.LIVE_TABLES:
        more = True
        while more:
            left = max_rows - result.total
            batch, more = _archive_batch(context, table, left, before, first=not result.total)
            result.add(batch)
            if more and (left <= ROWS_PER_TRANSACTION or not batch.total):
                # NOTE: the next tree does not fit what is left of the budget (or of a
                # transaction). Smaller trees of other tables might, but looking would
                # cost a transaction per table on every call; the next call takes them.
                return result
    return result


@dataclasses.dataclass
class _Choice:
    """Whole trees to move: their rows (``{table: {row id: root id}}``), the uuids of
    their roots (None for tables without one), and whether trees were left over."""

    rows: dict
    uuids: dict = dataclasses.field(default_factory=dict)
    more: bool = True


@oslo_db_api.wrap_db_retry(
    max_retries=5,
    retry_on_deadlock=True,
    exception_checker=lambda error: isinstance(error, db_exc.DBReferenceError),
)
@writer
def _archive_batch(context, table, budget, before, first):
    """Move, in one transaction, the next whole trees rooted in ``table`` that fit.

    Returns the ``ArchiveResult`` and whether trees are left that did not fit. A row
    added to a tree while this runs makes the parent's delete fail its foreign key;
    the transaction then rolls back and is retried.
    """
    choice = _choose(context, table, min(budget, ROWS_PER_TRANSACTION), before, first)
    _move(context, table, choice.rows)
    batch = ArchiveResult(rows={t.name: len(ids) for t, ids in choice.rows.items() if ids})
    if table.name == "instances":
        batch.instance_uuids = list(choice.uuids.values())
    return batch, choice.more


def _choose(context, table, budget, before, first):
    """The oldest whole trees rooted in ``table`` that fit ``budget`` (a ``_Choice``).

    Roots are read a page at a time: the first page guesses one row per table of the
    tree, the next ones use the rows per tree seen so far, so that few trees are read
    without being moved.
    """
    choice = _Choice(rows={t: {} for t in tree_tables(table)})
    used, after, per_tree = 0, None, len(choice.rows)
    while used + per_tree <= budget or (first and not used):
        roots = _deleted_roots(context, table, max(1, (budget - used) // per_tree), before, after)
        if not roots:
            choice.more = False
            break
        trees = _trees(context, table, roots)
        sizes = _sizes(roots, trees)
        taken = _fitting(roots, sizes, budget - used, first and not used)
        for t, ids in trees.items():
            choice.rows[t].update((i, root) for i, root in ids.items() if root in taken)
        choice.uuids.update((root, roots[root]) for root in roots if root in taken)
        if len(taken) < len(roots):
            break
        used, after = used + sum(sizes.values()), max(roots)
        per_tree = -(-sum(sizes.values()) // len(taken))
    return choice


def _deleted_roots(context, table, limit, before, after):
    """{id: uuid} of the oldest soft-deleted rows of ``table``, oldest first."""
    uuid = table.c.uuid if "uuid" in table.c else sa.null()
    query = sa.select(table.c.id, uuid).where(table.c.deleted != 0)
    if before is not None:
        query = query.where(table.c.deleted_at < before)
    if after is not None:
        query = query.where(table.c.id > after)
    return dict(context.session.connection().execute(query.order_by(table.c.id).limit(limit)).all())


def _trees(context, table, roots):
    """Every row of the trees of ``roots``: table -> {row id: root id}."""
    trees = {table: {root: root for root in roots}}
    for parent in tree_tables(table):
        for edge in owned_edges(parent):
            trees.setdefault(edge.child, {}).update(_children(context, edge, trees[parent]))
    return trees


def _children(context, edge, parents):
    """Rows of ``edge.child`` owned by the given parent rows: {child id: root id}."""
    children = {}
    for ids in _chunked(parents):
        result = context.session.connection().execute(_children_query(edge), {IDS: ids})
        children.update((child_id, parents[parent_id]) for child_id, parent_id in result.all())
    return children


@functools.cache
def _children_query(edge):
    """(child id, parent id) of the rows owned through ``edge`` by the parents ``IDS``."""
    parent_id = edge.parent.c.id
    if edge.key is parent_id:
        return sa.select(edge.child.c.id, edge.fk).where(edge.fk.in_(_ids()))
    return (
        sa.select(edge.child.c.id, parent_id)
        .join(edge.parent, edge.fk == edge.key)
        .where(parent_id.in_(_ids()))
    )


def _sizes(roots, trees):
    sizes = dict.fromkeys(roots, 0)
    for ids in trees.values():
        for root in ids.values():
            sizes[root] += 1
    return sizes


def _fitting(roots, sizes, budget, first):
    """The longest run of ``roots`` whose trees fit ``budget`` (at least one if ``first``)."""
    taken, used = set(), 0
    for root in roots:
        if used + sizes[root] > budget and not (first and not taken):
            break
        taken.add(root)
        used += sizes[root]
    return taken


def _move(context, root_table, rows):
    """Copy the rows into the shadows top-down, then delete them bottom-up."""
    _execute_chunked(context, _copy_statement(root_table), rows[root_table])
    for parent in rows:
        for edge in owned_edges(parent):
            _execute_chunked(context, _copy_owned_statement(edge), rows[edge.child])
    for table in reversed(list(rows)):
        _execute_chunked(context, _delete_statement(table), rows[table])


def _execute_chunked(context, statement, ids):
    for chunk in _chunked(ids):
        context.session.connection().execute(statement, {IDS: chunk})


@functools.cache
def _copy_statement(table):
    select = sa.select(*table.c).where(table.c.id.in_(_ids()))
    return sa.insert(models.shadow_of(table)).from_select(list(table.c.keys()), select)


@functools.cache
def _copy_owned_statement(edge):
    """Copy owned rows, marking each deleted when and as its already-copied parent was.

    Each row finds its parent's shadow copy through the live parent's id: the
    chosen rows drive the query, through indexes, whatever the size of the shadows.
    """
    child, parent_shadow = edge.child, models.shadow_of(edge.parent)
    columns = [_owned_column(child, parent_shadow, name) for name in child.c.keys()]
    select = sa.select(*columns).select_from(child)
    if edge.key is edge.parent.c.id:
        select = select.join(parent_shadow, parent_shadow.c.id == edge.fk)
    else:
        select = select.join(edge.parent, edge.key == edge.fk).join(
            parent_shadow, parent_shadow.c.id == edge.parent.c.id
        )
    select = select.where(child.c.id.in_(_ids()))
    return sa.insert(models.shadow_of(child)).from_select(list(child.c.keys()), select)


def _owned_column(child, parent_shadow, name):
    if name == "deleted":
        return sa.case((child.c.deleted == 0, child.c.id), else_=child.c.deleted)
    if name == "deleted_at":
        return sa.func.coalesce(child.c.deleted_at, parent_shadow.c.deleted_at)
    return child.c[name]


@functools.cache
def _delete_statement(table):
    return sa.delete(table).where(table.c.id.in_(_ids()))


def _ids():
    """The list of ids a statement is executed with, bound at execution."""
    return sa.bindparam(IDS, expanding=True)


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
