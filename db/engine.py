"""The one transaction context manager through which ``db/`` reaches the database.

``reader`` and ``writer`` decorate every DB API function; ``configure`` points them at
the URL from the configuration (the embedded SQLite file by default).
"""

import contextlib
import functools
import os

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
def write_transaction(context):
    """One writer transaction for the block: the DB API writers called in it with
    ``context`` join it, and it commits, or rolls back, as a whole."""
    check_access("pcisim.db.engine.write_transaction")
    with sqlite.reading(only_reads=False), context_manager.writer.using(context):
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
