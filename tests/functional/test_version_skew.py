"""A client pinned to older object versions gets backported objects, end to end.

The conductor runs in this process, on RabbitMQ, with PciDevice 1.1. The old client is
another OS process (``tests/functional/old_client.py``) that knows only PciDevice 1.0
and PciDeviceList 1.0: results of its calls come back in those versions, a newer
object it is handed is rewritten for it by the conductor's ``object_backport_versions``,
and it saves devices as computes did before PciDeviceList 1.4 (whole devices sent to
``save_batch`` and answered with). Its registry surgery stays in that process; this
one keeps the real classes.

The other way round, conductors are upgraded before computes: a conductor not yet
upgraded (``tests/functional/old_conductor.py``, PciDeviceList 1.3) refuses what a
compute of this release sends, before anything is written.
"""

import json
import uuid

import pytest
import sqlalchemy as sa
from oslo_serialization import jsonutils
from oslo_versionedobjects import exception as ovo_exception

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, rpc
from pcisim.conductor import rpcapi
from pcisim.db import engine, models
from pcisim.objects import base as objects_base
from pcisim.objects.instance import Instance
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from tests import config_overrides, object_factories
from tests.conftest import RABBIT_URL
from tests.functional import processes

# The old client must be another OS process, so the conductor has to be on RabbitMQ;
# the database does not matter here, so only the quickest one is used.
pytestmark = [
    pytest.mark.parametrize("transport_url", ["rabbit"], indirect=True),
    pytest.mark.parametrize("database", ["sqlite"], indirect=True),
]

ADDRESS = "0000:81:00.1"
INSTANCE = "11111111-1111-1111-1111-111111111111"


@pytest.fixture
def old_client(conductor, tmp_path):
    """Run a command of the old client against the conductor; return its report."""
    config_file = processes.rabbit_config(tmp_path / "pcisim.conf", RABBIT_URL, conductor.topic)

    def run(*args, stdin=None):
        result = processes.run_module(
            "tests.functional.old_client",
            "--config-file",
            config_file,
            *args,
            input=stdin,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report.pop("known_versions") == {"PciDevice": ["1.0"], "PciDeviceList": ["1.0"]}
        return report

    return run


@pytest.fixture
def device(conductor, ctxt):
    """A PciDevice 1.1, with a uuid, saved on a node by this (up-to-date) process."""
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node, ADDRESS, uuid=str(uuid.uuid4()))
    return device


def _is_old_device(got):
    """Whether ``got`` is a PciDevice 1.0 of the old client's own class, without uuid."""
    return (
        (got["name"], got["version"], got["class"]) == ("PciDevice", "1.0", "__main__.PciDevice")
        and "uuid" not in got["fields"]
        and "uuid" not in got["data"]
    )


def test_device_read_by_an_old_client_comes_back_in_the_version_it_knows(
    conductor, device, old_client
):
    got = old_client("get-by-dev-addr", device.compute_node_id, ADDRESS)["got"]

    assert _is_old_device(got), got
    assert (got["data"]["id"], got["data"]["address"]) == (device.id, ADDRESS)
    assert conductor.calls[("object_class_action_versions", "PciDevice", "get_by_dev_addr")] == 1


def test_device_list_read_by_an_old_client_holds_devices_in_the_version_it_knows(
    conductor, device, old_client
):
    got = old_client("get-by-compute-node", device.compute_node_id)["got"]

    assert (got["name"], got["version"]) == ("PciDeviceList", "1.0")
    assert [_is_old_device(item) for item in got["objects"]] == [True]
    assert got["objects"][0]["data"]["id"] == device.id


def test_newer_device_handed_to_an_old_client_is_backported_by_the_conductor(
    conductor, device, old_client
):
    primitive = device.obj_to_primitive()
    assert primitive["pcisim_object.version"] == "1.1"
    assert "uuid" in primitive["pcisim_object.data"]

    got = old_client("deserialize", stdin=jsonutils.dumps(primitive))["got"]

    assert _is_old_device(got), got
    assert (got["data"]["id"], got["data"]["address"]) == (device.id, ADDRESS)
    assert conductor.calls[("object_backport_versions", "PciDevice", "")] >= 1


def _save_batch_calls(conductor):
    return conductor.calls[("object_class_action_versions", "PciDeviceList", "save_batch")]


def test_devices_an_old_compute_creates_are_written_and_it_takes_their_ids(
    conductor, ctxt, old_client
):
    node = object_factories.compute_node(ctxt)
    addresses = ["0000:0a:00.0", "0000:0b:00.0"]

    report = old_client("create", node.id, *addresses)

    rows = {device.address: device for device in PciDeviceList.get_by_compute_node(ctxt, node.id)}
    assert sorted(rows) == addresses and report["missing"] == []
    got = report["got"]
    assert (got["name"], got["version"]) == ("PciDeviceList", "1.0")
    for item in got["objects"]:
        assert _is_old_device(item) and item["changed"] == [], item
        assert item["data"]["id"] == rows[item["data"]["address"]].id
        assert rows[item["data"]["address"]].label == "label_10de_1eb8"
    assert _save_batch_calls(conductor) == 1


def test_an_old_compute_saving_a_device_whose_row_is_gone_is_told_and_nothing_is_inserted(
    conductor, ctxt, old_client
):
    node = object_factories.compute_node(ctxt)
    held = [object_factories.vf(ctxt, node, f"0000:81:00.{f}") for f in (1, 2)]
    primitive = PciDeviceList(ctxt, objects=held).obj_to_primitive(target_version="1.0")
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        table = models.PciDevice.__table__
        connection.execute(sa.delete(table).where(table.c.address == "0000:81:00.2"))

    report = old_client("claim", INSTANCE, stdin=jsonutils.dumps(primitive))

    assert report["missing"] == ["0000:81:00.2"]
    saved, unsaved = report["got"]["objects"]
    assert (saved["changed"], saved["data"]["status"]) == ([], "claimed")
    assert unsaved["changed"] == ["instance_uuid", "status"]
    rows = PciDeviceList.get_by_compute_node(ctxt, node.id)
    assert [(d.address, d.status, d.instance_uuid) for d in rows] == [
        ("0000:81:00.1", "claimed", INSTANCE)
    ]
    assert _save_batch_calls(conductor) == 1


@pytest.fixture
def old_conductor(db, database, transport_url, tmp_path):
    """A conductor of the release before PciDeviceList 1.4, in a process of its own on
    this test's database, and this process as a compute of it."""
    topic = f"old-conductor-{uuid.uuid4().hex[:12]}"
    config_file = processes.rabbit_config(
        tmp_path / "old-conductor.conf", transport_url, topic, connection=database.url
    )
    transport = rpc.get_transport(url=transport_url)
    values = {("topic", "conductor"): topic, ("rpc_response_timeout", None): 15}
    with (
        processes.OldConductorProcess(config_file, topic=topic) as running,
        config_overrides.overridden(pcisim_conf.CONF, values),
    ):
        objects_base.set_indirection_api(rpcapi.ConductorAPI(transport))
        dbaccess.forbid("new-compute")
        try:
            yield running
        finally:
            dbaccess.allow()
            objects_base.set_indirection_api(None)
            transport.cleanup()


def _statuses(node_id):
    table = models.PciDevice.__table__
    query = sa.select(table.c.address, table.c.status).where(table.c.compute_node_id == node_id)
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return [tuple(row) for row in connection.execute(query)]


def test_a_new_compute_saving_through_a_conductor_not_yet_upgraded_is_refused_writing_nothing(
    db, old_conductor, ctxt
):
    with dbaccess.granted():
        node = object_factories.compute_node(ctxt)
        kept = object_factories.vf(ctxt, node)
    device = PciDevice.get_by_dev_addr(ctxt, node.id, kept.address)  # the old one serves reads
    device.status = "claimed"

    with pytest.raises(ovo_exception.IncompatibleObjectVersion, match="PciDeviceList"):
        PciDeviceList(ctxt, objects=[device]).save()

    assert device.obj_what_changed() == {"status"}
    assert _statuses(node.id) == [(kept.address, "available")]


def test_a_new_computes_allocation_with_its_instance_through_an_old_conductor_writes_nothing(
    db, old_conductor, ctxt
):
    with dbaccess.granted():
        node = object_factories.compute_node(ctxt)
        instance = Instance(ctxt, uuid=str(uuid.uuid4()), host="host1", node="node1")
        instance.vm_state = "building"
        instance.create()
        kept = object_factories.vf(ctxt, node, status="claimed", instance_uuid=instance.uuid)
    device = PciDevice.get_by_dev_addr(ctxt, node.id, kept.address)
    device.status, instance.vm_state = "allocated", "active"

    with pytest.raises(ovo_exception.IncompatibleObjectVersion, match="Instance"):
        PciDeviceList(ctxt, objects=[device]).save(instance=instance)

    assert _statuses(node.id) == [(kept.address, "claimed")]
    with dbaccess.granted():
        assert Instance.get_by_uuid(ctxt, instance.uuid).vm_state == "building"
