"""Flavors on the Nova face, and what a flavor gives the instance built from it."""

import pytest

from pcisim import context as pcisim_context
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance import Instance
from tests.functional import api_server

V = "/v2.1"
LATEST = {"OpenStack-API-Version": "compute latest"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory) as running:
        yield running


@pytest.fixture
def client(plane):
    return api_server.app(plane).test_client()


def _flavor(name, **extra):
    return {"flavor": {"name": name, "ram": 1024, "vcpus": 2, "disk": 5, **extra}}


@pytest.fixture
def flavor(client, request):
    name = request.node.name[:60]
    response = client.post(f"{V}/flavors", json=_flavor(name, id=name), headers=LATEST)
    assert response.status_code == 200, response.json
    yield response.json["flavor"]
    client.delete(f"{V}/flavors/{name}")


def test_a_created_flavor_is_shown_listed_and_deleted(client, flavor):
    shown = client.get(f"{V}/flavors/{flavor['id']}", headers=LATEST).json["flavor"]
    assert (shown["ram"], shown["vcpus"], shown["disk"], shown["swap"]) == (1024, 2, 5, 0)
    assert shown["extra_specs"] == {} and shown["os-flavor-access:is_public"] is True
    assert flavor["id"] in [f["id"] for f in client.get(f"{V}/flavors").json["flavors"]]
    detail = client.get(f"{V}/flavors/detail?is_public=None").json["flavors"]
    assert flavor["id"] in [f["id"] for f in detail]

    assert client.delete(f"{V}/flavors/{flavor['id']}").status_code == 202
    assert client.get(f"{V}/flavors/{flavor['id']}").json["itemNotFound"]["code"] == 404


def test_a_flavor_created_with_id_0_keeps_it(client):
    response = client.post(f"{V}/flavors", json=_flavor("zero", id=0), headers=LATEST)
    try:
        assert response.json["flavor"]["id"] == "0", response.json
    finally:
        client.delete(f"{V}/flavors/0")


def test_the_flavor_view_follows_the_microversion(client, flavor):
    old = client.get(f"{V}/flavors/{flavor['id']}").json["flavor"]
    assert "extra_specs" not in old and "description" not in old and old["swap"] == ""


def test_a_flavor_links_to_itself_under_the_api_version_and_as_a_bookmark(client, flavor):
    assert flavor["links"] == [
        {"rel": "self", "href": f"http://localhost/v2.1/flavors/{flavor['id']}"},
        {"rel": "bookmark", "href": f"http://localhost/flavors/{flavor['id']}"},
    ]


def test_a_flavor_without_an_id_gets_one(client):
    created = client.post(f"{V}/flavors", json=_flavor("no-id")).json["flavor"]
    assert len(created["id"]) == 36
    client.delete(f"{V}/flavors/{created['id']}")


def test_extra_specs_are_set_shown_replaced_and_removed_by_key(client, flavor):
    specs = f"{V}/flavors/{flavor['id']}/os-extra_specs"
    body = {"extra_specs": {"pci_passthrough:alias": "gpu:1", "hw:numa_nodes": 1}}
    assert client.post(specs, json=body).json == {
        "extra_specs": {"pci_passthrough:alias": "gpu:1", "hw:numa_nodes": "1"}
    }
    assert client.put(f"{specs}/hw:numa_nodes", json={"hw:numa_nodes": "2"}).status_code == 200
    assert client.get(f"{specs}/hw:numa_nodes").json == {"hw:numa_nodes": "2"}
    assert client.delete(f"{specs}/hw:numa_nodes").status_code == 200
    assert client.get(specs).json == {"extra_specs": {"pci_passthrough:alias": "gpu:1"}}
    missing = client.get(f"{specs}/hw:numa_nodes").json["itemNotFound"]["message"]
    assert "hw:numa_nodes" in missing


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        ({"pci_passthrough:alias": "gpu"}, "pci_passthrough:alias"),
        ({"pci_passthrough:alias": "fpga:1"}, "fpga"),
        ({"pci_passthrough:alias": "gpu:65"}, "count 65 of 'gpu' is above 64"),
        ({"hw:pci_numa_affinity_policy": "nearby"}, "nearby"),
        ({"hw:numa_nodes": "0"}, "hw:numa_nodes"),
        ({"hw:numa_nodes": "³"}, "hw:numa_nodes"),
        ({"hw:numa_nodes": "3"}, "2 vCPUs"),
        ({"bad key!": "1"}, "bad key!"),
        ({"big": 10**300}, "big"),
    ],
)
def test_an_extra_spec_pcisim_cannot_read_is_refused_and_nothing_written(
    client, flavor, specs, says
):
    url = f"{V}/flavors/{flavor['id']}/os-extra_specs"
    response = client.post(url, json={"extra_specs": {"other": "kept", **specs}})
    assert response.status_code == 400
    assert says in response.json["badRequest"]["message"]
    assert client.get(url).json == {"extra_specs": {}}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"flavor": {"name": "x", "vcpus": 1, "disk": 1}}, "ram"),
        (_flavor("x", ram=0), "ram"),
        (_flavor(" padded"), "name"),
        (_flavor("x", colour="red"), "colour"),
        (_flavor("x", extra_specs={"hw:numa_nodes": "1"}), "extra_specs"),
    ],
)
def test_a_bad_flavor_is_refused_naming_the_bad_value(client, body, says):
    response = client.post(f"{V}/flavors", json=body)
    assert response.status_code == 400
    assert says in response.json["badRequest"]["message"]


def test_a_second_flavor_with_the_same_id_or_name_is_a_conflict(client, flavor):
    again = client.post(f"{V}/flavors", json=_flavor(flavor["name"], id="other"))
    assert again.json["conflictingRequest"]["code"] == 409
    assert flavor["name"] in again.json["conflictingRequest"]["message"]
    same_id = client.post(f"{V}/flavors", json=_flavor("other", id=flavor["id"]))
    assert same_id.status_code == 409


@pytest.mark.parametrize("query", ["is_public=maybe", "minRam=lots", "minDisk=-1"])
def test_a_bad_flavor_filter_is_refused_naming_it(client, query):
    response = client.get(f"{V}/flavors?{query}")
    assert response.status_code == 400
    assert query.split("=")[1] in response.json["badRequest"]["message"]


def test_private_flavors_are_listed_only_when_asked(client):
    client.post(
        f"{V}/flavors",
        json=_flavor("private", id="private", **{"os-flavor-access:is_public": False}),
    )
    try:
        assert "private" not in [f["id"] for f in client.get(f"{V}/flavors").json["flavors"]]
        everyone = client.get(f"{V}/flavors?is_public=None").json["flavors"]
        assert "private" in [f["id"] for f in everyone]
    finally:
        client.delete(f"{V}/flavors/private")


def test_an_instance_of_a_flavor_has_its_sizes_devices_policy_and_a_copy_of_it(
    client, plane, flavor
):
    specs = {"pci_passthrough:alias": "gpu:1", "hw:pci_numa_affinity_policy": "preferred"}
    client.post(f"{V}/flavors/{flavor['id']}/os-extra_specs", json={"extra_specs": specs})
    context = pcisim_context.get_admin_context()
    instance = plane.api.create_from_flavor(
        context, "vm", Flavor.get_by_flavor_id(context, flavor["id"]), image_ref="cirros"
    )
    assert plane.wait_for(instance.uuid) == "active"
    try:
        built = Instance.get_by_uuid(context, instance.uuid, ["pci_devices", "pci_requests"])
        assert (built.vcpus, built.memory_mb, built.root_gb) == (2, 1024, 5)
        assert built.image_ref == "cirros" and built.flavor.extra_specs == specs
        assert [d.vendor_id for d in built.pci_devices] == ["10de"]
        (request,) = built.pci_requests.requests
        assert (request.alias_name, request.numa_policy) == ("gpu", "preferred")
    finally:
        plane.delete(instance.uuid)
