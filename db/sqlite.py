"""SQLite files as pcisim runs them: write-ahead log and pooled connections.

oslo.db gives a SQLite file a NullPool: every transaction opens a connection and
closes it, and in WAL mode that costs a disk sync at commit and at close. Measured on
this project's machines, a one-row update transaction takes 2.9 ms that way and 0.7 ms
on a pooled connection, and the tracker saves once per instance boot and delete.

So the engine oslo.db creates gets a QueuePool instead, as SQLAlchemy itself would
give a file database. oslo.db's own per-connection setup was attached to the pool it
created, so the new pool's ``connect`` listener repeats the part pcisim relies on:
oslo.db emits BEGIN itself (pysqlite must not), and foreign keys are enforced.
Connections are handed to one thread at a time by the pool, so pysqlite's same-thread
check is off, as SQLAlchemy does for pooled file databases.

Writers begin with BEGIN IMMEDIATE. A plain BEGIN starts a transaction that takes
the write lock only at its first write, and if another connection wrote in between,
SQLite fails it at once with "database is locked" instead of waiting. Taking the lock
at the start makes every writer wait its turn (``busy_timeout``). Readers, in
``reading()``, begin with a plain BEGIN: in WAL mode they read a snapshot while one
writer writes, and never wait for it.
"""

import contextlib
import contextvars

import sqlalchemy as sa

POOL_SIZE = 5
MAX_OVERFLOW = 20
BUSY_TIMEOUT_MS = 30000


def is_file_url(url):
    return url.startswith("sqlite:///") and url[len("sqlite:///") :] not in ("", ":memory:")


def file_path(url):
    return url[len("sqlite:///") :]


def _configure_connection(dbapi_connection, connection_record):
    dbapi_connection.isolation_level = None
    for pragma in (
        "foreign_keys=ON",
        "journal_mode=WAL",
        "synchronous=NORMAL",
        f"busy_timeout={BUSY_TIMEOUT_MS}",
    ):
        dbapi_connection.execute(f"PRAGMA {pragma}")


_READING = contextvars.ContextVar("pcisim_sqlite_reading", default=None)


@contextlib.contextmanager
def reading(only_reads=True):
    """Transactions begun in the block only read (``only_reads``) or may write.

    Inside a block that may write, a reading block changes nothing: the enclosing
    transaction begins lazily, at its first statement, which may come from the reader.
    """
    if only_reads and _READING.get() is False:
        yield
        return
    token = _READING.set(only_reads)
    try:
        yield
    finally:
        _READING.reset(token)


def _begin(connection):
    # oslo.db emits its own BEGIN unless this marker (its own) says one was emitted;
    # this listener is put ahead of oslo.db's.
    if "in_transaction" not in connection.info:
        connection.exec_driver_sql("BEGIN" if _READING.get() else "BEGIN IMMEDIATE")
        connection.info["in_transaction"] = True


def use_pooled_wal_connections(engine):
    """Give an oslo.db SQLite file engine a pool of WAL-mode connections."""
    # The dialect learns the server's version on the first connection of the original
    # pool; make sure that has happened before the pool is replaced.
    engine.connect().close()
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    cparams["check_same_thread"] = False
    engine.pool.dispose()
    engine.pool = sa.pool.QueuePool(
        lambda: engine.dialect.dbapi.connect(*cargs, **cparams),
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        dialect=engine.dialect,
        events=[(_configure_connection, "connect")],
    )
    _listen_first(engine, "begin", _begin)


def _listen_first(engine, event, listener):
    """Register ``listener`` ahead of the engine's existing ones for ``event``."""
    existing = list(getattr(engine.dispatch, event))
    for fn in existing:
        sa.event.remove(engine, event, fn)
    sa.event.listen(engine, event, listener)
    for fn in existing:
        sa.event.listen(engine, event, fn)
