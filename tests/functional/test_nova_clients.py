"""The real OpenStack clients drive pcisim's Nova face unmodified: openstacksdk,
the ``openstack`` CLI (a subprocess) and python-novaclient, each pointed at one
endpoint with no authentication (``auth_type none``), as the README shows."""

import json

import openstack
import pytest
from keystoneauth1 import noauth, session
from novaclient import api_versions
from novaclient import client as nova_client

from tests.functional import nova_cloud

# NOTE: openstacksdk warns of its own internals' deprecations (and of its optional
# metrics support) on calls made as its documentation shows; they are not ours to fix.
pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.OpenStackDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    with nova_cloud.cloud(tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


@pytest.fixture
def cli(cloud, home):
    _, url = cloud

    def run(*args):
        return nova_cloud.openstack(url, home, *args)

    return run


def _json(result):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _boot_gpu_server(cli, name, *options):
    """``openstack server create --wait`` of a ``gpu.small`` server named ``name``; the
    CompletedProcess."""
    return cli(
        "server",
        "create",
        "--flavor",
        "gpu.small",
        "--image",
        "cirros-0.6.3",
        "--nic",
        "none",
        "--wait",
        name,
        *options,
    )


# ---------------------------------------------------------------------- openstacksdk


@pytest.fixture
def sdk(cloud):
    _, url = cloud
    connection = openstack.connect(auth_type="none", endpoint=f"{url}/v2.1")
    yield connection
    connection.close()


def test_openstacksdk_boots_a_gpu_server_that_shows_its_device_and_deletes_it(sdk, cloud):
    image = sdk.image.find_image("cirros-0.6.3", ignore_missing=False)
    server = sdk.compute.create_server(
        name="sdk-vm", flavor_id="gpu.small", image_id=image.id, networks="none"
    )
    server = sdk.compute.wait_for_server(server, wait=60)

    assert server.status == "ACTIVE" and server.flavor.extra_specs == {
        "pci_passthrough:alias": "gpu:1"
    }
    assert "10de:1eb8" in server.metadata["os-pci:pci_devices"]
    sdk.compute.delete_server(server)
    sdk.compute.wait_for_delete(server, wait=60)
    with pytest.raises(openstack.exceptions.NotFoundException):
        sdk.compute.find_server("sdk-vm", ignore_missing=False)


def test_openstacksdk_creates_a_flavor_with_extra_specs_and_lists_hypervisors(sdk):
    flavor = sdk.compute.create_flavor(name="sdk.flavor", ram=256, vcpus=1, disk=1)
    sdk.compute.create_flavor_extra_specs(flavor, {"hw:pci_numa_affinity_policy": "socket"})

    found = sdk.compute.find_flavor("sdk.flavor", ignore_missing=False, get_extra_specs=True)
    assert found.extra_specs == {"hw:pci_numa_affinity_policy": "socket"}
    assert [h.name for h in sdk.compute.hypervisors()] == ["node1"]
    sdk.compute.delete_flavor(flavor)


# ------------------------------------------------------------------- openstack CLI


def test_the_cli_creates_and_shows_a_flavor_with_a_pci_alias(cli):
    created = _json(
        cli(
            "flavor",
            "create",
            "--ram",
            "256",
            "--vcpus",
            "1",
            "--disk",
            "1",
            "cli.gpu",
            "-f",
            "json",
        )
    )
    assert (
        cli("flavor", "set", "--property", "pci_passthrough:alias=gpu:1", "cli.gpu").returncode == 0
    )

    shown = _json(cli("flavor", "show", "cli.gpu", "-f", "json"))
    assert shown["id"] == created["id"]
    assert shown["properties"] == {"pci_passthrough:alias": "gpu:1"}
    assert "cli.gpu" in [f["Name"] for f in _json(cli("flavor", "list", "-f", "json"))]
    assert cli("flavor", "delete", "cli.gpu").returncode == 0


def test_the_cli_boots_lists_shows_and_deletes_a_gpu_server(cli):
    created = _json(_boot_gpu_server(cli, "cli-vm", "-f", "json"))
    assert created["status"] == "ACTIVE"

    listed = _json(cli("server", "list", "-f", "json"))
    assert [(s["Name"], s["Status"]) for s in listed] == [("cli-vm", "ACTIVE")]
    shown = _json(cli("server", "show", "cli-vm", "-f", "json"))
    assert "10de:1eb8 type-PCI allocated" in shown["properties"]["os-pci:pci_devices"]
    assert cli("server", "delete", "--wait", "cli-vm").returncode == 0
    assert _json(cli("server", "list", "-f", "json")) == []


def test_the_cli_shows_the_fault_of_a_boot_that_cannot_fit(cli):
    first = _boot_gpu_server(cli, "fits")
    second = _boot_gpu_server(cli, "does-not-fit")
    try:
        assert first.returncode == 0 and second.returncode != 0
        shown = _json(cli("server", "show", "does-not-fit", "-f", "json"))
        assert shown["status"] == "ERROR" and "No valid host" in shown["fault"]["message"]
    finally:
        cli("server", "delete", "--wait", "does-not-fit", "fits")


def test_the_cli_lists_and_shows_hypervisors(cli):
    (hypervisor,) = _json(cli("hypervisor", "list", "-f", "json"))
    assert (hypervisor["Hypervisor Hostname"], hypervisor["State"]) == ("node1", "up")
    shown = _json(cli("hypervisor", "show", "node1", "-f", "json"))
    assert (shown["id"], shown["service_host"]) == (hypervisor["ID"], "host1")


def test_the_cli_refuses_a_microversion_the_face_does_not_serve(cli):
    result = cli("--os-compute-api-version", "2.99", "server", "list")
    assert result.returncode != 0 and "2.99" in result.stderr


# --------------------------------------------------------------------- novaclient


def test_novaclient_negotiates_2_88_and_drives_flavors_servers_and_hypervisors(cloud):
    plane, url = cloud
    auth_session = session.Session(auth=noauth.NoAuth(endpoint=f"{url}/v2.1"))
    version = api_versions.discover_version(
        nova_client.Client("2.1", session=auth_session), api_versions.APIVersion("2.latest")
    )
    nova = nova_client.Client(version.get_string(), session=auth_session)

    assert version.get_string() == "2.88"
    flavor = nova.flavors.find(name="gpu.small")
    assert flavor.get_keys() == {"pci_passthrough:alias": "gpu:1"}
    image = nova.glance.find_image("cirros-0.6.3")
    server = nova.servers.create("nova-vm", image, flavor, nics="none")
    assert plane.wait_for(server.id) == "active"
    assert "10de:1eb8" in nova.servers.get(server.id).metadata["os-pci:pci_devices"]
    assert [h.hypervisor_hostname for h in nova.hypervisors.list()] == ["node1"]
    nova.servers.delete(server)
    plane.wait_for(server.id, done=("deleted",))
