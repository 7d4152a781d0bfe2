"""The HTTP API over an in-process control plane, through its WSGI interface."""

import uuid

import pytest

from pcisim import conf as pcisim_conf
from pcisim import testing, trace
from pcisim.api import app, openapi
from tests import config_overrides
from tests.functional import api_server


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """One control plane for the module, on SQLite: the API layer is what is tested."""
    with api_server.sqlite_plane(tmp_path_factory) as running:
        yield running


@pytest.fixture
def client(plane):
    return plane.wsgi_app().test_client()


def _boot(client, plane, **server):
    response = client.post("/servers", json={"server": {"name": "vm", **server}})
    assert response.status_code == 202, response.json
    server_id = response.json["server"]["id"]
    plane.wait_for(server_id)
    return server_id


def _delete(client, plane, server_id):
    assert client.delete(f"/servers/{server_id}").status_code == 204
    plane.wait_for(server_id, done=("deleted",))
    testing.wait_until(
        lambda: not client.get(f"/pci-devices?server={server_id}").json["pci_devices"],
        what="devices freed",
    )


def test_a_gpu_server_boots_shows_its_device_and_is_deleted(client, plane):
    server_id = _boot(client, plane, pci_requests="gpu:1")

    server = client.get(f"/servers/{server_id}").json["server"]
    assert (server["status"], server["host"]) == ("ACTIVE", "host1")
    (device,) = server["pci_devices"]
    assert (device["vendor_id"], device["status"], device["server"]) == (
        "10de",
        "allocated",
        server_id,
    )
    assert server_id in [s["id"] for s in client.get("/servers").json["servers"]]
    _delete(client, plane, server_id)
    assert client.get(f"/servers/{server_id}").status_code == 404


def test_the_list_form_of_pci_requests_is_accepted(client, plane):
    server_id = _boot(client, plane, pci_requests=[{"alias": "vf", "count": 2}])
    assert len(client.get(f"/servers/{server_id}").json["server"]["pci_devices"]) == 2
    _delete(client, plane, server_id)


def test_a_request_no_host_can_satisfy_ends_in_error_with_a_fault(client, plane):
    server_id = _boot(client, plane, pci_requests="gpu:2")
    server = client.get(f"/servers/{server_id}").json["server"]
    assert server["status"] == "ERROR"
    assert "No valid host" in server["fault"]["message"]
    _delete(client, plane, server_id)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "body"),
        ({}, "server"),
        ({"server": {}}, "name"),
        ({"server": {"name": ""}}, "name"),
        ({"server": {"name": "vm", "colour": "red"}}, "colour"),
        ({"server": {"name": "vm", "vcpus": 0}}, "vcpus"),
        ({"server": {"name": "vm", "pci_requests": [{"alias": "gpu", "count": 0}]}}, "count"),
        ({"server": {"name": "vm", "pci_requests": "gpu:x"}}, "gpu:x"),
        ({"server": {"name": "vm", "pci_requests": 7}}, "pci_requests"),
    ],
)
def test_a_bad_create_body_is_a_400_naming_the_problem(client, body, says):
    response = client.post("/servers", json=body)
    assert response.status_code == 400
    assert response.json["error"]["code"] in ("request.invalid", "pci.request_invalid")
    assert says in response.json["error"]["message"]


def test_an_unknown_alias_is_a_400_with_its_own_code(client):
    response = client.post("/servers", json={"server": {"name": "vm", "pci_requests": "fpga:1"}})
    assert response.status_code == 400
    assert response.json["error"]["code"] == "pci.alias_not_found"


def test_an_unknown_server_is_a_404(client):
    response = client.get(f"/servers/{uuid.uuid4()}")
    assert (response.status_code, response.json["error"]["code"]) == (404, "server.not_found")
    assert "Traceback" not in response.json["error"]["message"]
    assert client.delete(f"/servers/{uuid.uuid4()}").status_code == 404


def test_an_unknown_route_and_method_are_json_errors(client):
    assert client.get("/nowhere").json["error"]["code"] == "http.404"
    response = client.put("/servers")
    assert (response.status_code, response.json["error"]["code"]) == (405, "http.405")
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "POST"}


def test_hypervisors_show_usage_and_pci_pools(client):
    (node,) = client.get("/hypervisors").json["hypervisors"]
    assert node["host"] == "host1"
    assert {pool["dev_type"] for pool in node["pci_pools"]} >= {"type-PCI", "type-VF"}
    assert client.get(f"/hypervisors/{node['id']}").json["hypervisor"]["id"] == node["id"]
    assert client.get("/hypervisors/999999").status_code == 404


def test_the_pci_tree_puts_vfs_under_their_pf(client):
    (node,) = client.get("/hypervisors").json["hypervisors"]
    tree = client.get(f"/hypervisors/{node['id']}/pci-tree").json
    (pf,) = tree["pfs"]
    assert len(pf["vfs"]) == 2 and all(vf["parent_addr"] == pf["address"] for vf in pf["vfs"])
    assert [d["dev_type"] for d in tree["devices"]] == ["type-PCI"]


def test_pci_devices_filter_by_host_type_status_and_node(client):
    all_devices = client.get("/pci-devices").json["pci_devices"]
    vfs = client.get("/pci-devices?dev_type=type-VF").json["pci_devices"]
    assert len(all_devices) == 4 and len(vfs) == 2
    assert client.get("/pci-devices?host=elsewhere").json["pci_devices"] == []
    node_id = all_devices[0]["compute_node_id"]
    on_node = client.get(f"/pci-devices?compute_node_id={node_id}").json["pci_devices"]
    assert on_node == all_devices
    assert client.get(f"/pci-devices?compute_node_id={node_id + 1}").json["pci_devices"] == []
    assert client.get(f"/pci-devices/{vfs[0]['id']}").json["pci_device"]["dev_type"] == "type-VF"


@pytest.mark.parametrize(
    "query", ["status=broken", "dev_type=gpu", "colour=red", "server=x", "compute_node_id=x"]
)
def test_a_bad_pci_device_filter_is_a_400(client, query):
    response = client.get(f"/pci-devices?{query}")
    assert response.status_code == 400
    assert response.json["error"]["code"] == "request.invalid"


def test_the_openapi_document_describes_every_route(client):
    document = client.get("/openapi.json").json
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) == {
        "/servers",
        "/servers/{server_id}",
        "/hypervisors",
        "/hypervisors/{node_id}",
        "/hypervisors/{node_id}/pci-tree",
        "/pci-devices",
        "/pci-devices/{device_id}",
    } | {openapi.PATH_VALUE.sub(r"{\2}", path) for path, _, _ in app.NOVA_ROUTES}


def test_every_response_carries_the_request_id_its_messages_are_traced_under(client):
    first = client.get("/hypervisors").headers["X-OpenStack-Request-ID"]
    second = client.get("/hypervisors").headers["X-OpenStack-Request-ID"]
    assert first.startswith("req-") and second.startswith("req-") and first != second


def test_serving_a_request_leaves_the_serving_thread_acting_as_before(client):
    with trace.acting_as("a-test"):
        client.get("/servers/not-a-uuid")
        assert trace.actor() == "a-test"


def test_the_healthcheck_answers_ok(client):
    assert client.get("/healthcheck").status_code == 200


def test_the_healthcheck_answers_503_while_the_operator_disables_it(plane, tmp_path):
    disable = tmp_path / "healthcheck_disable"
    values = {
        ("backends", "healthcheck"): ["disable_by_file"],
        ("disable_by_file_path", "healthcheck"): str(disable),
    }
    with config_overrides.overridden(pcisim_conf.CONF, values):
        client = plane.wsgi_app().test_client()
        assert client.get("/healthcheck").status_code == 200
        disable.touch()
        assert client.get("/healthcheck").status_code == 503
