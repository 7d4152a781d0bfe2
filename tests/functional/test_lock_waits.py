"""On MariaDB, a write that waits too long for a row lock is retried, not lost: a DB API
call on its own, or a transaction of several (a compute's free of devices) run again whole.

Another transaction holds the row; the write waits for it longer than the session's
``innodb_lock_wait_timeout`` (one second here), which oslo.db reports as a deadlock;
the write is rolled back and run again, and lands once the holder commits. The holder
commits only once oslo.db has logged that it retries, so a retry is certain.
"""

import logging
import threading
import uuid

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from pcisim.db import allocations, engine
from pcisim.db import api as db_api
from pcisim.objects.pci_device import PciDeviceList
from tests import backends, object_factories

LOCK_WAIT_SECONDS = 1
WAIT_TIMEOUT = 30


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    scratch = backends.ScratchDatabase("mysql", tmp_path_factory)
    yield scratch
    scratch.drop()


def _impatient(engine_):
    @sa.event.listens_for(engine_, "connect")
    def set_lock_wait_timeout(connection, record):
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}")

    engine_.dispose()  # oslo.db connected once already, to check the URL


@pytest.fixture
def impatient_db(database):
    """The DB API on MariaDB, giving up on a row lock after a second, as a busy server
    with a short ``innodb_lock_wait_timeout`` would."""
    database.empty()
    manager = enginefacade.transaction_context()
    manager.append_on_engine_create(_impatient)
    engine.configure_manager(manager, database.url, max_retries=0)
    reset = engine.context_manager.patch_factory(manager)
    yield manager
    reset()
    manager.dispose_pool()


class RowHolder:
    """A transaction of its own holding rows ``FOR UPDATE`` until oslo.db says it is
    retrying a write that gave up waiting for them."""

    def __init__(self, database, query):
        self.engine = database.manager.writer.get_engine()
        self.query = query
        self.locked = threading.Event()
        self.retried = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.handler = _OnRecord("Performing DB retry", self.retried.set)
        self.logger = logging.getLogger("oslo_db.api")

    def __enter__(self):
        self.logger.addHandler(self.handler)
        self.level, self.logger.level = self.logger.level, logging.DEBUG
        self.thread.start()
        assert self.locked.wait(WAIT_TIMEOUT)
        return self

    def __exit__(self, *exc_info):
        self.thread.join(WAIT_TIMEOUT)
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)

    def _hold(self):
        with self.engine.connect() as connection, connection.begin():
            connection.execute(self.query)
            self.locked.set()
            self.retried.wait(WAIT_TIMEOUT)


class _OnRecord(logging.Handler):
    """Calls ``action`` when a record whose message starts with ``text`` is logged."""

    def __init__(self, text, action):
        super().__init__(logging.DEBUG)
        self.text, self.action = text, action

    def emit(self, record):
        if record.getMessage().startswith(self.text):
            self.action()


def _rows(database, table, **where):
    with database.manager.writer.get_engine().connect() as connection:
        query = sa.select(table).filter_by(**where)
        return [dict(row._mapping) for row in connection.execute(query)]


def test_an_instance_update_that_waits_too_long_for_its_row_is_retried(
    impatient_db, database, ctxt
):
    instance_uuid = str(uuid.uuid4())
    db_api.instance_create(ctxt, {"uuid": instance_uuid, "vm_state": "building"})
    instances = sa.table("instances", sa.column("uuid"), sa.column("vm_state"))
    lock = sa.text("SELECT * FROM instances WHERE uuid = :uuid FOR UPDATE").bindparams(
        uuid=instance_uuid
    )

    with RowHolder(database, lock) as holder:
        db_api.instance_update(ctxt, instance_uuid, {"vm_state": "active"})

    assert holder.retried.is_set()
    [row] = _rows(database, instances, uuid=instance_uuid)
    assert row["vm_state"] == "active"


def test_a_device_batch_save_that_waits_too_long_for_its_rows_is_retried(
    impatient_db, database, ctxt
):
    node = object_factories.compute_node(ctxt)
    device = {
        "address": "0000:81:00.1",
        "vendor_id": "8086",
        "product_id": "1520",
        "dev_type": "type-VF",
        "status": "available",
        "label": "label_8086_1520",
    }
    db_api.pci_device_batch_save(ctxt, node.id, create=[device])
    devices = sa.table(
        "pci_devices", sa.column("address"), sa.column("status"), sa.column("compute_node_id")
    )
    lock = sa.text("SELECT * FROM pci_devices WHERE compute_node_id = :node FOR UPDATE").bindparams(
        node=node.id
    )

    with RowHolder(database, lock) as holder:
        db_api.pci_device_batch_save(
            ctxt, node.id, update={"0000:81:00.1": {"status": "claimed", "instance_uuid": "i-1"}}
        )

    assert holder.retried.is_set()
    [row] = _rows(database, devices, compute_node_id=node.id)
    assert row["status"] == "claimed"


def test_a_free_that_waits_too_long_for_an_allocation_is_run_again_whole(
    impatient_db, database, ctxt
):
    node = object_factories.compute_node(ctxt)
    instance_uuid = str(uuid.uuid4())
    device = object_factories.vf(ctxt, node, status="allocated", instance_uuid=instance_uuid)
    (state,), _ = allocations.host_states(ctxt, [node.id])
    allocations.claim(ctxt, node.id, state.generation, instance_uuid, {"VCPU": 1})
    device.status, device.instance_uuid = "available", None
    node.vcpus_used = 0
    lock = sa.text("SELECT * FROM allocations WHERE consumer_uuid = :uuid FOR UPDATE").bindparams(
        uuid=instance_uuid
    )

    with RowHolder(database, lock) as holder:
        PciDeviceList(ctxt, objects=[device]).save(node=node, released=[instance_uuid])

    assert holder.retried.is_set()
    assert db_api.pci_device_get_by_addr(ctxt, node.id, device.address).status == "available"
    assert allocations.get_by_consumer(ctxt, instance_uuid) == {}
    assert db_api.compute_node_get(ctxt, node.id).vcpus_used == 0
    assert not node.obj_what_changed()
