"""Each transaction on a SQLite file issues exactly one BEGIN, of the kind db/sqlite.py
chooses: BEGIN IMMEDIATE for writers, a plain BEGIN for readers, which never wait for
a writer.

db/sqlite.py relies on oslo.db's private ``connection.info["in_transaction"]`` marker
to keep oslo.db from emitting a second BEGIN; if oslo.db renamed or dropped it, a
transaction would issue two BEGINs (and fail) or none on a reused pooled connection.
"""

import threading

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from pcisim import context as pcisim_context
from pcisim.db import api as db_api
from pcisim.db import engine as db_engine
from pcisim.db import sqlite
from tests.unit.db import factories


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
    with sqlite.reading(), manager.reader.using(pcisim_context.RequestContext()) as session:
        session.execute(sa.text("SELECT count(*) FROM t")).scalar()


def _write(manager):
    with manager.writer.using(pcisim_context.RequestContext()) as session:
        session.execute(sa.text("INSERT INTO t (n) VALUES (1)"))


def _fail_writing(manager):
    with pytest.raises(RuntimeError):
        with manager.writer.using(pcisim_context.RequestContext()) as session:
            session.execute(sa.text("INSERT INTO t (n) VALUES (2)"))
            raise RuntimeError("rolled back")


def test_a_reader_issues_one_plain_begin(manager, begins):
    _read(manager)
    assert begins.per_transaction == [["BEGIN"]]


def test_a_writer_issues_one_begin_immediate(manager, begins):
    _write(manager)
    assert begins.per_transaction == [["BEGIN IMMEDIATE"]]


def test_transactions_on_reused_pooled_connections_each_issue_one_begin(manager, begins):
    # NOTE: a rolled-back writer too: the marker must be cleared on rollback as on
    # commit, or the next transaction on that connection would issue no BEGIN at all.
    for step in (_write, _read, _fail_writing, _write, _read, _read):
        step(manager)
    immediate, plain = ["BEGIN IMMEDIATE"], ["BEGIN"]
    assert begins.per_transaction == [immediate, plain, immediate, immediate, plain, plain]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_db_api_read_proceeds_while_a_write_transaction_is_open(db, ctxt):
    node = factories.compute_node(ctxt)
    writing, read_done = threading.Event(), threading.Event()

    def hold_a_write_transaction():
        with db_engine.get_engine().connect() as connection:
            connection.exec_driver_sql("UPDATE compute_nodes SET vcpus = vcpus + 1")
            writing.set()
            read_done.wait(timeout=60)
            connection.rollback()

    writer = threading.Thread(target=hold_a_write_transaction)
    writer.start()
    try:
        assert writing.wait(timeout=60)
        read = db_api.compute_node_get(ctxt, node.id)
        finished_while_writing = not read_done.is_set() and writer.is_alive()
    finally:
        read_done.set()
        writer.join()

    assert finished_while_writing
    assert read.vcpus == node.vcpus
