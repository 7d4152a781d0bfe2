"""[api] auth_token: every request carries it in X-Auth-Token, or is refused and does nothing.

The API is served over HTTP for real where the ``pcisim`` CLI talks to it; other
requests go through the WSGI interface. Refusing to listen beyond loopback without a
token is tested on ``pcisim-api`` and ``pcisim up`` as operators start them.
"""

import json
import logging
import pathlib
import subprocess
import sys
import urllib.request

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from pcisim.api import app as api_app
from pcisim.api.nova import face as nova_face
from tests.functional import api_server, processes

TOKEN = "t0ken-for-tests-Only"
HEADERS = {"X-Auth-Token": TOKEN}
PCISIM = pathlib.Path(sys.executable).with_name("pcisim")
SERVER = {"server": {"name": "vm", "pci_requests": "gpu:1"}}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def app(plane):
    return api_server.app(plane, auth_token=TOKEN)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture(scope="module")
def url(app):
    with api_server.serving(app) as served:
        yield served


# ------------------------------------------------------------------------ requests


def test_a_request_without_the_token_is_refused_with_auth_required_and_does_nothing(client):
    before = api_server.database_rows()

    response = client.post("/servers", json=SERVER)

    assert response.status_code == 401
    assert response.json["error"]["code"] == "auth.required"
    assert "X-Auth-Token" in response.json["error"]["message"]
    assert api_server.database_rows() == before


@pytest.mark.parametrize("token", ["wrong", TOKEN[:-1], TOKEN + "x", "", TOKEN.upper()])
def test_a_wrong_token_is_refused_with_auth_invalid_and_does_nothing(client, token):
    before = api_server.database_rows()

    response = client.post("/servers", json=SERVER, headers={"X-Auth-Token": token})

    assert (response.status_code, response.json["error"]["code"]) == (401, "auth.invalid")
    assert api_server.database_rows() == before


def test_the_healthcheck_is_answered_without_the_token_as_a_load_balancer_asks(client):
    assert client.get("/healthcheck").status_code == 200


def test_the_right_token_is_served(client, plane):
    response = client.post("/servers", json=SERVER, headers=HEADERS)

    assert response.status_code == 202
    plane.wait_for(response.json["server"]["id"])


@pytest.mark.parametrize(
    "path",
    [
        "/servers",
        "/servers/00000000-0000-0000-0000-000000000000",
        "/hypervisors",
        "/hypervisors/1",
        "/hypervisors/1/pci-tree",
        "/pci-devices",
        "/pci-devices/1",
        "/openapi.json",
        "/nowhere",
    ],
)
def test_every_path_needs_the_token_even_the_document_and_unknown_ones(client, path):
    response = client.get(path)

    assert (response.status_code, response.json["error"]["code"]) == (401, "auth.required")
    assert response.headers["WWW-Authenticate"].startswith("X-Auth-Token")


def test_a_refusal_carries_a_request_id_as_every_response_does(client):
    assert client.get("/servers").headers["X-OpenStack-Request-ID"].startswith("req-")


def test_neither_the_token_nor_a_wrong_one_is_ever_logged(client, caplog):
    caplog.set_level(logging.DEBUG)

    client.get("/servers", headers={"X-Auth-Token": "a-wrong-t0ken"})
    client.get("/servers", headers=HEADERS)
    client.get("/servers")

    assert "Refused GET /servers" in caplog.text
    assert TOKEN not in caplog.text and "a-wrong-t0ken" not in caplog.text


def test_without_a_token_configured_no_header_is_needed(plane):
    assert api_server.app(plane).test_client().get("/hypervisors").status_code == 200


# ------------------------------------------------------------------------- OpenAPI


def test_the_openapi_document_declares_the_header_as_its_security_scheme(client):
    document = client.get("/openapi.json", headers=HEADERS).json

    assert document["components"]["securitySchemes"] == {
        "token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"}
    }
    assert document["security"] == [{"token": []}]
    operations = [op for ops in document["paths"].values() for op in ops.values()]
    guarded = [op for op in operations if op.get("security") != []]
    assert all("401" in operation["responses"] for operation in guarded)
    # NOTE: version documents answer without a token, as Nova's and Keystone's do.
    assert {op["operationId"] for op in operations if op not in guarded} == {
        "list_versions",
        "show_version",
        "show_version_2",
        "list_image_versions",
        "list_identity_versions",
        "show_identity_version",
        "create_token",
    }


def test_without_a_token_configured_the_document_declares_no_security(plane):
    document = api_server.app(plane).test_client().get("/openapi.json").json

    assert "security" not in document and "components" not in document


def test_schemathesis_with_the_token_gets_conforming_answers_and_without_it_only_401(app):
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app, headers=HEADERS)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(api_app.ROUTES) + len(api_app.NOVA_ROUTES)
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
        def authorised_and_not(case):
            answered = case.call_and_validate(
                headers=HEADERS, excluded_checks=api_server.NOT_APPLICABLE_CHECKS
            )
            case.headers = {k: v for k, v in (case.headers or {}).items() if k != "X-Auth-Token"}
            # NOTE: what answers without a token (version documents, a request for
            # one) answers the same with or without it.
            open_route = nova_face.is_open(case.operation.path)
            assert case.call().status_code == (answered.status_code if open_route else 401)

        authorised_and_not()


# ------------------------------------------------------------------------------ CLI


def _cli(url, *args, token=None):
    env = processes.environment()
    env.pop("PCISIM_TOKEN", None)
    if token is not None:
        env["PCISIM_TOKEN"] = token
    return subprocess.run(
        [str(PCISIM), "--url", url, *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_the_cli_sends_the_token_given_with_token(url):
    result = _cli(url, "-f", "json", "hypervisor", "list", "--token", TOKEN)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["host"] == "host1"


def test_the_cli_sends_the_token_of_pcisim_token(url):
    assert _cli(url, "hypervisor", "list", token=TOKEN).returncode == 0


def test_the_cli_without_the_token_exits_1_with_one_line_saying_how_to_give_it(url):
    result = _cli(url, "server", "list")

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "auth.required" in result.stderr and "--token or PCISIM_TOKEN" in result.stderr


def test_the_cli_never_prints_the_token_it_has(url):
    for args in (("server", "list"), ("--help",), ("server", "show", "x")):
        result = _cli(url, *args, token=TOKEN + "x")
        assert TOKEN not in result.stdout + result.stderr


# ---------------------------------------------------------- listening beyond loopback

NOT_LOOPBACK = ["0.0.0.0", "::", "192.0.2.10"]


def _api_config(tmp_path, listen, token=None):
    api = {"listen": listen, "port": 0}
    if token:
        api["auth_token"] = token
    return processes.write_config(
        tmp_path / "pcisim.conf", {"DEFAULT": {"state_path": tmp_path / "state"}, "api": api}
    )


def _run(script, config, *args):
    command = [str(processes.console_script(script)), *args, "--config-file", str(config)]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=processes.environment()
    )


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
def test_pcisim_api_refuses_a_non_loopback_address_without_a_token(tmp_path, listen):
    result = _run("pcisim-api", _api_config(tmp_path, listen))

    assert result.returncode != 0
    assert result.stderr.count("\n") == 1
    assert f"listen on {listen}," in result.stderr and "[api] auth_token" in result.stderr


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
def test_pcisim_up_refuses_a_non_loopback_address_without_a_token_and_writes_nothing(
    tmp_path, listen
):
    result = _run("pcisim", _api_config(tmp_path, listen), "up")

    assert result.returncode != 0
    assert f"listen on {listen}," in result.stderr and "[api] auth_token" in result.stderr
    assert not (tmp_path / "state").exists()


def test_pcisim_api_with_a_token_listens_on_every_address_and_requires_it(tmp_path):
    config = _api_config(tmp_path, "0.0.0.0", token=TOKEN)

    with processes.ApiProcess(config) as api:
        local = f"http://127.0.0.1:{api.url.rpartition(':')[2]}"
        assert _cli(local, "server", "list").returncode == 1
        request = urllib.request.Request(f"{local}/openapi.json", headers=HEADERS)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["security"] == [{"token": []}]

    assert TOKEN not in api.output


@pytest.mark.parametrize("listen", ["127.0.0.1", "localhost", "::1"])
def test_pcisim_api_on_a_loopback_address_needs_no_token(tmp_path, listen):
    with processes.ApiProcess(_api_config(tmp_path, listen)) as api:
        assert api.url.startswith("http://")
