"""Compute-side saves arrive at a conductor in another OS process over RabbitMQ.

The conductor is the installed ``pcisim-conductor`` console script, started with a
configuration file of its own: a topic no other run uses, and the scratch database of
each backend. This process acts as a compute: it has no database access, and its
remotable object calls travel to that conductor. What they did is read back from the
database directly.
"""

import contextlib
import uuid

import pytest
import sqlalchemy as sa

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, exception, rpc
from pcisim.conductor import rpcapi
from pcisim.db import engine, models
from pcisim.objects import base as objects_base
from pcisim.objects.compute_node import ComputeNodeList
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from tests import backends, config_overrides, object_factories
from tests.conftest import RABBIT_URL
from tests.functional import processes

CONF = pcisim_conf.CONF
# A call to a conductor that died should fail its test in seconds, not in a minute.
RPC_TIMEOUT = 15


@pytest.fixture(scope="module")
def rabbit():
    if not backends.port_open(RABBIT_URL):
        backends.unavailable(f"RabbitMQ unreachable at {rpc.safe_url(RABBIT_URL)}")
    return RABBIT_URL


def _conductor_process(directory, database):
    """``pcisim-conductor`` on ``database`` and RabbitMQ, serving a topic of its own."""
    topic = f"conductor-{uuid.uuid4().hex[:12]}"
    config_file = processes.rabbit_config(
        directory / "pcisim.conf", RABBIT_URL, topic, connection=database.url
    )
    return processes.ConductorProcess(config_file, topic=topic)


@pytest.fixture(scope="module")
def conductor_process(rabbit, database, tmp_path_factory):
    """A conductor process on each backend, started once: starting one takes a second."""
    with _conductor_process(tmp_path_factory.mktemp("conductor"), database) as running:
        yield running


@contextlib.contextmanager
def _acting_as_compute(topic):
    """While the block runs, this process is a compute of the conductor serving ``topic``."""
    transport = rpc.get_transport(url=RABBIT_URL)
    values = {("topic", "conductor"): topic, ("rpc_response_timeout", None): RPC_TIMEOUT}
    with config_overrides.overridden(CONF, values):
        objects_base.set_indirection_api(rpcapi.ConductorAPI(transport))
        dbaccess.forbid("test-compute")
        try:
            yield
        finally:
            dbaccess.allow()
            objects_base.set_indirection_api(None)
            transport.cleanup()


@pytest.fixture
def compute(db, conductor_process):
    """This process as a compute of the conductor process, on an empty database."""
    with _acting_as_compute(conductor_process.topic):
        yield


def _device(ctxt, node, address, **values):
    values = {
        "vendor_id": "8086",
        "product_id": "1520",
        "dev_type": "type-VF",
        "status": "available",
        "label": "label_8086_1520",
        "parent_addr": "0000:81:00.0",
        **values,
    }
    return PciDevice(ctxt, compute_node_id=node.id, address=address, **values)


def _rows(model):
    """Every row of ``model``'s table, read directly (as only the conductor may)."""
    table = model.__table__
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return [dict(row._mapping) for row in connection.execute(sa.select(table))]


def _statuses():
    return {row["address"]: row["status"] for row in _rows(models.PciDevice)}


def _delete_device_rows():
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(sa.delete(models.PciDevice.__table__))


def test_compute_node_created_on_the_compute_side_is_a_row(compute, ctxt):
    node = object_factories.compute_node(ctxt)

    [row] = _rows(models.ComputeNode)
    assert (row["id"], row["uuid"], row["hypervisor_hostname"]) == (node.id, node.uuid, "node1")
    assert not node.obj_what_changed()


def test_devices_created_on_the_compute_side_are_rows_of_their_node(compute, ctxt):
    node = object_factories.compute_node(ctxt)
    devices = [_device(ctxt, node, f"0000:81:00.{f}") for f in (1, 2)]
    for device in devices:
        device.save()

    rows = _rows(models.PciDevice)
    assert sorted((row["id"], row["compute_node_id"]) for row in rows) == sorted(
        (device.id, node.id) for device in devices
    )
    assert _statuses() == {"0000:81:00.1": "available", "0000:81:00.2": "available"}


def test_saved_device_change_is_written_to_its_row(compute, ctxt):
    node = object_factories.compute_node(ctxt)
    device = _device(ctxt, node, "0000:81:00.1")
    device.save()
    device.status, device.instance_uuid = "allocated", "i-1"

    device.save()

    [row] = _rows(models.PciDevice)
    assert (row["id"], row["status"], row["instance_uuid"]) == (device.id, "allocated", "i-1")
    assert not device.obj_what_changed()


def test_batch_save_of_a_device_list_writes_every_change(compute, ctxt):
    node = object_factories.compute_node(ctxt)
    devices = PciDeviceList(ctxt, objects=[_device(ctxt, node, f"0000:81:00.{f}") for f in (1, 2)])
    devices.save()
    devices[0].status = "claimed"
    devices[1].status = "removed"
    devices.objects.append(_device(ctxt, node, "0000:82:00.0", dev_type="type-PF", label="pf"))

    devices.save()

    rows = {row["address"]: row for row in _rows(models.PciDevice)}
    assert rows["0000:81:00.1"]["status"] == "claimed"
    assert rows["0000:81:00.2"]["deleted"] == devices[1].id
    assert rows["0000:82:00.0"]["id"] == devices[2].id
    assert not any(device.obj_what_changed() for device in devices)


def test_saving_a_device_whose_row_is_gone_raises_typed_not_found_and_inserts_nothing(
    compute, ctxt
):
    node = object_factories.compute_node(ctxt)
    device = _device(ctxt, node, "0000:81:00.1", status="allocated", instance_uuid="i-1")
    device.save()
    _delete_device_rows()
    device.status, device.instance_uuid = "available", None

    with pytest.raises(exception.PciDeviceNotFound) as raised:
        device.save()

    assert raised.value.kwargs == {"node_id": node.id, "address": "0000:81:00.1"}
    assert device.obj_what_changed() == {"status", "instance_uuid"}
    assert _rows(models.PciDevice) == []


def test_sigterm_stops_the_conductor_with_exit_code_zero(rabbit, db, tmp_path, ctxt):
    with _conductor_process(tmp_path, db) as running:
        with _acting_as_compute(running.topic):
            assert list(ComputeNodeList.get_all(ctxt)) == []

        returncode = running.terminate(timeout=processes.STOP_TIMEOUT)

    assert returncode == 0, running.output
    assert f"{processes.STOPPED} {running.topic!r}" in running.output


def test_conductor_refuses_to_start_on_an_unmigrated_database(tmp_path):
    config_file = processes.write_config(
        tmp_path / "pcisim.conf",
        {"database": {"connection": f"sqlite:///{tmp_path / 'empty.sqlite'}"}},
    )

    result = processes.run_conductor(config_file)

    assert result.returncode != 0
    assert "run: pcisim-manage db sync" in result.stderr


def test_conductor_with_a_missing_config_file_exits_naming_it(tmp_path):
    missing = tmp_path / "missing.conf"

    result = processes.run_conductor(missing)

    assert result.returncode != 0
    assert str(missing) in result.stderr
