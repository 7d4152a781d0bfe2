"""Real database servers for the test suite: one fresh, migrated database per run.

SQLite (a file) is always there. MariaDB and PostgreSQL are used when reachable on
127.0.0.1; when one is not, its tests skip, except in CI (``CI=true``), where a
missing server is a failure.
"""

import contextlib
import os
import socket
import uuid
from urllib import parse

import kombu
import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from pcisim.db import engine, migration

SERVER_URLS = {
    "mysql": os.environ.get("PCISIM_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306"),
    "postgresql": os.environ.get(
        "PCISIM_TEST_POSTGRESQL_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    ),
}
BACKENDS = ("sqlite", "mysql", "postgresql")


def in_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason):
    """Skip locally; fail in CI, where every server must be there."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: every server is required)", pytrace=False)
    pytest.skip(reason)


def port_open(url, timeout=2.0):
    """Whether the server of ``url`` accepts TCP connections."""
    parsed = parse.urlsplit(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def exchange_anchor(url, exchange_name):
    """Keep an auto-deleting topic exchange alive: bind a queue of our own to it."""
    with kombu.Connection(url.replace("rabbit://", "amqp://", 1)) as connection:
        exchange = kombu.Exchange(exchange_name, type="topic", durable=False, auto_delete=True)
        anchor = kombu.Queue(
            f"{exchange_name}-anchor-{uuid.uuid4().hex[:8]}",
            exchange,
            routing_key="anchor",
            exclusive=True,
            auto_delete=True,
        )
        anchor(connection.default_channel).declare()
        yield


class ScratchDatabase:
    """A database created for this run, migrated to head, dropped at the end."""

    def __init__(self, backend, tmp_path_factory):
        self.backend = backend
        self.name = f"pcisim_test_{uuid.uuid4().hex[:12]}"
        if backend == "sqlite":
            path = tmp_path_factory.mktemp("sqlite") / "pcisim.sqlite"
            self.url = f"sqlite:///{path}"
            self._admin = None
        else:
            self._admin = sa.create_engine(
                SERVER_URLS[backend], isolation_level="AUTOCOMMIT", pool_pre_ping=True
            )
            self._create_on_server()
        self.manager = enginefacade.transaction_context()
        engine.configure_manager(self.manager, self.url, max_retries=0)
        migration.db_sync(self.manager.writer.get_engine())

    def _create_on_server(self):
        try:
            with self._admin.connect() as connection:
                connection.execute(sa.text(f"CREATE DATABASE {self.name}"))
        except sa.exc.OperationalError as error:
            self._admin.dispose()
            unavailable(f"{self.backend} server unreachable: {error.orig}")
        url = sa.engine.make_url(SERVER_URLS[self.backend]).set(database=self.name)
        if self.backend == "mysql":
            url = url.update_query_dict({"charset": "utf8mb4"})
        self.url = url.render_as_string(hide_password=False)

    def empty(self):
        """Delete every row, children first, so each test starts from nothing."""
        from pcisim.db import models

        engine = self.manager.writer.get_engine()
        with engine.begin() as connection:
            for table in reversed(models.Base.metadata.sorted_tables):
                connection.execute(table.delete())

    def drop(self):
        self.manager.dispose_pool()
        if self._admin is None:
            return
        with self._admin.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE {self.name}"))
        self._admin.dispose()
