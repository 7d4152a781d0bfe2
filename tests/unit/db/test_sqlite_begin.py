"""Each transaction on a SQLite file issues exactly one BEGIN, of the kind db/sqlite.py
chooses: BEGIN IMMEDIATE, for readers and writers alike.

db/sqlite.py relies on oslo.db's private ``connection.info["in_transaction"]`` marker
to keep oslo.db from emitting a second BEGIN; if oslo.db renamed or dropped it, a
transaction would issue two BEGINs (and fail) or none on a reused pooled connection.
"""

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from pcisim import context as pcisim_context
from pcisim.db import engine as db_engine


class Begins:
    """The statements starting with BEGIN that the engine sends, by transaction (each
    ends with a commit or a rollback)."""

    def __init__(self, engine):
        self.per_transaction, self._current = [], []
        sa.event.listen(engine, "before_cursor_execute", self._executing)
        sa.event.listen(engine, "commit", self._ended)
        sa.event.listen(engine, "rollback", self._ended)

    def _executing(self, connection, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("BEGIN"):
            self._current.append(statement.strip())

    def _ended(self, connection):
        self.per_transaction.append(self._current)
        self._current = []


@pytest.fixture
def manager(tmp_path):
    manager = enginefacade.transaction_context()
    db_engine.configure_manager(manager, f"sqlite:///{tmp_path / 'begin.sqlite'}", max_retries=0)
    with manager.writer.using(pcisim_context.RequestContext()) as session:
        session.execute(sa.text("CREATE TABLE t (n INTEGER)"))
    yield manager
    manager.dispose_pool()


@pytest.fixture
def begins(manager):
    return Begins(manager.writer.get_engine())


def _read(manager):
    with manager.reader.using(pcisim_context.RequestContext()) as session:
        session.execute(sa.text("SELECT count(*) FROM t")).scalar()


def _write(manager):
    with manager.writer.using(pcisim_context.RequestContext()) as session:
        session.execute(sa.text("INSERT INTO t (n) VALUES (1)"))


def _fail_writing(manager):
    with pytest.raises(RuntimeError):
        with manager.writer.using(pcisim_context.RequestContext()) as session:
            session.execute(sa.text("INSERT INTO t (n) VALUES (2)"))
            raise RuntimeError("rolled back")


def test_a_reader_issues_one_begin_immediate(manager, begins):
    _read(manager)
    assert begins.per_transaction == [["BEGIN IMMEDIATE"]]


def test_a_writer_issues_one_begin_immediate(manager, begins):
    _write(manager)
    assert begins.per_transaction == [["BEGIN IMMEDIATE"]]


def test_transactions_on_reused_pooled_connections_each_issue_one_begin_immediate(manager, begins):
    # NOTE: a rolled-back writer too: the marker must be cleared on rollback as on
    # commit, or the next transaction on that connection would issue no BEGIN at all.
    for step in (_write, _read, _fail_writing, _write, _read, _read):
        step(manager)
    assert begins.per_transaction == [["BEGIN IMMEDIATE"]] * 6
