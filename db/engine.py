"""The one transaction context manager through which ``db/`` reaches the database.

``reader`` and ``writer`` decorate every DB API function; ``configure`` points them at
the URL from the configuration (the embedded SQLite file by default).
"""

import contextlib
import functools
import os

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, exception
from pcisim.db import sqlite

context_manager = enginefacade.transaction_context()


def _guarded(transaction, only_reads):
    """Wrap a DB function in ``transaction`` after checking this thread may use the DB;
    a transaction it begins on SQLite takes the write lock unless ``only_reads``."""

    def decorator(fn):
        in_transaction = transaction(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check_access(f"{fn.__module__}.{fn.__qualname__}")
            with sqlite.reading(only_reads):
                return in_transaction(*args, **kwargs)

        return wrapper

    return decorator


def check_access(function):
    """Raise ``DBNotAllowed`` naming ``function`` when this thread may not use the DB."""
    binary = dbaccess.forbidden_for()
    if binary is not None:
        raise exception.DBNotAllowed(binary=binary, function=function)


reader = _guarded(context_manager.reader, only_reads=True)
writer = _guarded(context_manager.writer, only_reads=False)
# NOTE: a writer that runs SQLAlchemy Core statements only takes ``context.connection``:
# it joins a transaction of either kind, and in ``write_transaction(core=True)`` no
# ORM Session is made at all (a tenth of a scheduler's claim, bench/README.md).
core_writer = _guarded(context_manager.writer.connection, only_reads=False)


_retrying = oslo_db_api.wrap_db_retry(
    max_retries=5, retry_interval=0.1, max_retry_interval=2, retry_on_deadlock=True
)


def retry_on_deadlock(fn):
    """Run ``fn(context, ...)``, which opens a transaction, again (a few times, after a
    short random pause) when the database rolls it back as a deadlock's victim or for a
    lock it waited too long for: an archive run or another writer crossed its locks.

    Only an outermost transaction is run again. The victim of a deadlock is the whole
    transaction: inside an outer one, the statements it ran before are gone with it,
    and running ``fn`` again would commit its own writes without them. There the error
    goes up to whoever began the transaction, to retry it whole or to fail."""
    retrying = _retrying(fn)

    @functools.wraps(fn)
    def wrapper(context, *args, **kwargs):
        if in_transaction(context):
            return fn(context, *args, **kwargs)
        return retrying(context, *args, **kwargs)

    return wrapper


def retried_write_transaction(context, work):
    """``work()`` in one writer transaction of ``context`` on a Core connection
    (``write_transaction(core=True)``: a ``writer`` in it joins through a Session of
    its own), run again whole when the database rolls it back as a deadlock's victim
    (``retry_on_deadlock``); what it returns. ``work`` must leave its objects' pending
    changes until it has committed."""

    @retry_on_deadlock
    def run(context):
        with write_transaction(context, core=True):
            return work()

    return run(context)


def in_transaction(context):
    """Whether a transaction of ``context`` is open in this thread."""
    try:
        return context.transaction_ctx is not None
    except db_exc.NoEngineContextEstablished:
        return False


def configure(conf=pcisim_conf.CONF, create_directory=True):
    """Point the DB API at the configured database; call once per process."""
    configure_manager(
        context_manager,
        pcisim_conf.database_connection(conf),
        max_retries=conf.database.max_retries,
        retry_interval=conf.database.retry_interval,
        create_directory=create_directory,
    )


def configure_manager(manager, url, max_retries=3, retry_interval=1, create_directory=True):
    """Configure an enginefacade transaction manager for ``url`` as pcisim runs it.

    For a SQLite file, creates its directory (unless ``create_directory`` is false), so
    that a first run on a fresh machine needs no preparation, and tunes its connections
    (see ``db/sqlite.py``).
    """
    if sqlite.is_file_url(url):
        if create_directory:
            os.makedirs(os.path.dirname(sqlite.file_path(url)) or ".", exist_ok=True)
        manager.append_on_engine_create(sqlite.use_pooled_wal_connections)
    manager.configure(
        connection=url, sqlite_fk=True, max_retries=max_retries, retry_interval=retry_interval
    )


@contextlib.contextmanager
def write_transaction(context, core=False):
    """One writer transaction for the block: the DB API writers called in it with
    ``context`` join it, and it commits, or rolls back, as a whole.

    ``core``: the transaction is a Core connection's, for a block whose writers are
    ``core_writer``s; a ``writer`` called in it joins through a Session of its own
    on that connection, which leaves the commit (or rollback) to the block."""
    check_access("pcisim.db.engine.write_transaction")
    manager = context_manager.writer.connection if core else context_manager.writer
    with sqlite.reading(only_reads=False), manager.using(context):
        yield


@contextlib.contextmanager
def read_transaction(context):
    """One reader transaction for the block: the DB API readers called in it with
    ``context`` join it and see one snapshot (where the database gives one), for the
    price of one BEGIN."""
    check_access("pcisim.db.engine.read_transaction")
    with sqlite.reading(only_reads=True), context_manager.reader.using(context):
        yield


def get_engine():
    check_access("pcisim.db.engine.get_engine")
    return context_manager.writer.get_engine()
