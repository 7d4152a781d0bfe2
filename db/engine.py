"""The one transaction context manager through which ``db/`` reaches the database.

``reader`` and ``writer`` decorate every DB API function; ``configure`` points them at
the URL from the configuration (the embedded SQLite file by default).
"""

import functools
import os

from oslo_db.sqlalchemy import enginefacade

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, exception

context_manager = enginefacade.transaction_context()


def _guarded(transaction):
    """Wrap a DB function in ``transaction`` after checking this thread may use the DB."""

    def decorator(fn):
        in_transaction = transaction(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check_access(f"{fn.__module__}.{fn.__qualname__}")
            return in_transaction(*args, **kwargs)

        return wrapper

    return decorator


def check_access(function):
    """Raise ``DBNotAllowed`` naming ``function`` when this thread may not use the DB."""
    binary = dbaccess.forbidden_for()
    if binary is not None:
        raise exception.DBNotAllowed(binary=binary, function=function)


reader = _guarded(context_manager.reader)
writer = _guarded(context_manager.writer)


def configure(conf=pcisim_conf.CONF):
    """Point the DB API at the configured database; call once per process.

    For the embedded SQLite file, creates the state directory so that a first run on a
    fresh machine needs no preparation.
    """
    url = pcisim_conf.database_connection(conf)
    if url.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(url[len("sqlite:///") :]) or ".", exist_ok=True)
    context_manager.configure(
        connection=url,
        sqlite_fk=True,
        max_retries=conf.database.max_retries,
        retry_interval=conf.database.retry_interval,
    )


def get_engine():
    check_access("db.engine.get_engine")
    return context_manager.writer.get_engine()
