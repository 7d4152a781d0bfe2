"""The Nova face's version discovery and microversions, through the WSGI interface.

No control plane is needed: version documents and microversion checks answer before
any handler acts.
"""

import pytest

from pcisim.api import app, schemas
from pcisim.api.nova import schemas as nova_schemas

VERSION_HEADERS = ("OpenStack-API-Version", "X-OpenStack-Nova-API-Version")


@pytest.fixture
def client():
    return app.create_app(app.Api(compute=None)).test_client()


def test_the_root_lists_v2_1_as_current_with_its_microversion_range(client):
    (version,) = client.get("/").json["versions"]
    assert (version["id"], version["status"]) == ("v2.1", "CURRENT")
    assert (version["min_version"], version["version"]) == ("2.1", "2.88")
    assert version["links"][0] == {"rel": "self", "href": "http://localhost/v2.1/"}


@pytest.mark.parametrize("path", ["/v2.1", "/v2.1/"])
def test_v2_1_is_described_with_and_without_its_slash(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert response.json["version"]["id"] == "v2.1"


@pytest.mark.parametrize(
    ("headers", "answered"),
    [
        ({}, "2.1"),
        ({"OpenStack-API-Version": "compute 2.60"}, "2.60"),
        ({"X-OpenStack-Nova-API-Version": "2.47"}, "2.47"),
        ({"OpenStack-API-Version": "compute latest"}, "2.88"),
        (
            {"OpenStack-API-Version": "compute 2.53", "X-OpenStack-Nova-API-Version": "2.10"},
            "2.53",
        ),
        ({"OpenStack-API-Version": "image 2.5"}, "2.1"),
    ],
)
def test_the_answer_names_the_microversion_it_used(client, headers, answered):
    response = client.get("/v2.1/", headers=headers)
    assert response.headers["OpenStack-API-Version"] == f"compute {answered}"
    assert response.headers["X-OpenStack-Nova-API-Version"] == answered
    assert set(VERSION_HEADERS) <= set(response.headers["Vary"].split(", "))


@pytest.mark.parametrize("asked", ["3.0", "2.89", "1.9"])
def test_an_unsupported_microversion_is_a_406_compute_fault_naming_it(client, asked):
    response = client.get("/v2.1/", headers={"OpenStack-API-Version": f"compute {asked}"})
    assert response.status_code == 406
    fault = response.json["computeFault"]
    assert fault["code"] == 406 and asked in fault["message"] and "2.88" in fault["message"]


@pytest.mark.parametrize("asked", ["2.x", "two", "2", "2.1.1"])
def test_a_malformed_microversion_is_a_bad_request_naming_it(client, asked):
    response = client.get("/v2.1", headers={"X-OpenStack-Nova-API-Version": asked})
    assert response.status_code == 400
    assert asked in response.json["badRequest"]["message"]


def test_errors_on_the_nova_face_are_nova_faults_and_pcisims_stay_its_own(client):
    response = client.get("/v2.1/nowhere")
    assert response.json["itemNotFound"]["code"] == 404
    assert client.get("/nowhere").json["error"]["code"] == "http.404"


def test_each_face_declares_the_error_bodies_it_answers():
    assert app.error_schema("/v2.1/servers") is nova_schemas.FAULT
    assert app.error_schema("/servers") is schemas.ERROR
