"""A client pinned to older object versions gets backported objects, end to end.

The conductor runs in this process, on RabbitMQ, with PciDevice 1.1. The old client is
another OS process (``tests/functional/old_client.py``) that knows only PciDevice 1.0
and PciDeviceList 1.0: results of its calls come back in those versions, and a newer
object it is handed is rewritten for it by the conductor's ``object_backport_versions``.
Its registry surgery stays in that process; this one keeps the real classes.
"""

import json
import uuid

import pytest
from oslo_serialization import jsonutils

from tests import object_factories
from tests.conftest import RABBIT_URL
from tests.functional import processes

# The old client must be another OS process, so the conductor has to be on RabbitMQ;
# the database does not matter here, so only the quickest one is used.
pytestmark = [
    pytest.mark.parametrize("transport_url", ["rabbit"], indirect=True),
    pytest.mark.parametrize("database", ["sqlite"], indirect=True),
]

ADDRESS = "0000:81:00.1"


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
        assert report["known_versions"] == {"PciDevice": ["1.0"], "PciDeviceList": ["1.0"]}
        return report["got"]

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
    got = old_client("get-by-dev-addr", device.compute_node_id, ADDRESS)

    assert _is_old_device(got), got
    assert (got["data"]["id"], got["data"]["address"]) == (device.id, ADDRESS)
    assert conductor.calls[("object_class_action_versions", "PciDevice", "get_by_dev_addr")] == 1


def test_device_list_read_by_an_old_client_holds_devices_in_the_version_it_knows(
    conductor, device, old_client
):
    got = old_client("get-by-compute-node", device.compute_node_id)

    assert (got["name"], got["version"]) == ("PciDeviceList", "1.0")
    assert [_is_old_device(item) for item in got["objects"]] == [True]
    assert got["objects"][0]["data"]["id"] == device.id


def test_newer_device_handed_to_an_old_client_is_backported_by_the_conductor(
    conductor, device, old_client
):
    primitive = device.obj_to_primitive()
    assert primitive["pcisim_object.version"] == "1.1"
    assert "uuid" in primitive["pcisim_object.data"]

    got = old_client("deserialize", stdin=jsonutils.dumps(primitive))

    assert _is_old_device(got), got
    assert (got["data"]["id"], got["data"]["address"]) == (device.id, ADDRESS)
    assert conductor.calls[("object_backport_versions", "PciDevice", "")] >= 1
