"""The control plane as separate OS processes: one conductor, two computes and the API
on RabbitMQ and MariaDB, configured by INI files, as an operator deploys it."""

import contextlib
import json
import urllib.request
import uuid

import pytest

from pcisim import testing
from tests import backends
from tests.conftest import RABBIT_URL
from tests.functional import flows, nova_cloud, processes


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """MariaDB, as the issue asks: the processes share it."""
    scratch = backends.ScratchDatabase("mysql", tmp_path_factory)
    yield scratch
    scratch.drop()


def _config(directory, name, connection=None, **sections):
    return processes.cloud_config(directory, name, RABBIT_URL, connection, **sections)


@pytest.fixture
def cloud(db, rabbit_url, tmp_path):
    """Conductor, compute-1 (GPUs), compute-2 (SR-IOV NIC) and the API, each a process."""
    directory = tmp_path / f"run{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    configs = {
        "conductor": _config(directory, "conductor", db.url),
        "compute-1": _config(
            directory,
            "compute-1",
            DEFAULT={"host": "compute-1"},
            compute={"inventory": "gpu-node=gpus=2"},
        ),
        "compute-2": _config(
            directory,
            "compute-2",
            DEFAULT={"host": "compute-2"},
            compute={"inventory": "nic-node=pfs=1,vfs_per_pf=4"},
        ),
        "api": _config(directory, "api"),
    }
    with contextlib.ExitStack() as stack:
        services = {
            "conductor": stack.enter_context(processes.ConductorProcess(configs["conductor"]))
        }
        for host in ("compute-1", "compute-2"):
            services[host] = stack.enter_context(processes.ComputeProcess(configs[host]))
        services["api"] = stack.enter_context(processes.ApiProcess(configs["api"]))
        yield services


def _http(method, url, body=None):
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _boot(api, request):
    status, body = _http(
        "POST", f"{api}/servers", {"server": {"name": "vm", "pci_requests": request}}
    )
    assert status == 202, body
    url = f"{api}/servers/{body['server']['id']}"
    return url, testing.wait_until(
        lambda: (s := _http("GET", url)[1]["server"])["status"] != "BUILD" and s, 60
    )


def test_pci_servers_boot_and_delete_across_processes(cloud):
    api = cloud["api"].url
    gpu_url, gpu = _boot(api, "gpu:1")
    vf_url, vf = _boot(api, [{"alias": "vf", "count": 2}])

    assert (gpu["status"], gpu["host"]) == ("ACTIVE", "compute-1")
    assert (vf["status"], vf["host"]) == ("ACTIVE", "compute-2")
    assert {d["status"] for d in flows.devices(instance_uuid=vf["id"])} == {"allocated"}
    (pf,) = flows.devices(dev_type="type-PF")
    assert pf["status"] == "unavailable"

    for url in (gpu_url, vf_url):
        assert _http("DELETE", url)[0] == 204
    for server in (gpu, vf):
        testing.wait_until(lambda s=server: not flows.devices(instance_uuid=s["id"]), 60)
    assert {d["status"] for d in flows.devices()} == {"available"}


def test_the_api_answers_its_healthcheck(cloud):
    with urllib.request.urlopen(f"{cloud['api'].url}/healthcheck", timeout=30) as response:
        assert response.status == 200


def test_the_openstack_cli_boots_shows_and_deletes_a_vf_server_across_processes(cloud, tmp_path):
    api = cloud["api"].url
    flavor = {"name": "vf.pair", "id": "vf.pair", "ram": 512, "vcpus": 1, "disk": 1}
    assert _http("POST", f"{api}/v2.1/flavors", {"flavor": flavor})[0] == 200
    specs = {"extra_specs": {"pci_passthrough:alias": "vf:2"}}
    assert _http("POST", f"{api}/v2.1/flavors/vf.pair/os-extra_specs", specs)[0] == 200

    def openstack(*args):
        return nova_cloud.openstack(api, tmp_path, *args)

    image = ("--image", "cirros-0.6.3", "--nic", "none")
    created = openstack("server", "create", "--flavor", "vf.pair", *image, "--wait", "vf-vm")
    assert created.returncode == 0, created.stderr
    shown = json.loads(openstack("server", "show", "vf-vm", "-f", "json").stdout)
    assert shown["OS-EXT-SRV-ATTR:host"] == "compute-2"
    assert shown["properties"]["os-pci:pci_devices"].count("type-VF allocated") == 2
    assert openstack("server", "delete", "--wait", "vf-vm").returncode == 0
    testing.wait_until(lambda: {d["status"] for d in flows.devices()} == {"available"}, 60)


def test_every_service_stops_cleanly_on_sigterm(cloud):
    for name in ("api", "compute-1", "compute-2", "conductor"):
        assert cloud[name].terminate(timeout=20) == 0, cloud[name].output
