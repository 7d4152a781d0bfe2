"""Hand-picked bad requests: a 4xx with a stable code, and not one row written.

Cases schemathesis is unlikely to find (bodies that are not JSON, numbers JSON allows
and Python parses oddly, ids past the columns' range, repeated query parameters), sent
through the WSGI interface of a control plane on SQLite. ``test_http_api.py`` has the
first cases; this table extends them.
"""

import json

import pytest

from tests.functional import api_server

SERVER_ID = "00000000-0000-0000-0000-000000000000"


def _json(server):
    return {"json": {"server": {"name": "vm", **server}}}


def _raw(data, content_type="application/json"):
    return {"data": data, "content_type": content_type}


INVALID, MALFORMED, PCI = "request.invalid", "request.malformed_json", "pci.request_invalid"
MEDIA, NO_ALIAS = "request.unsupported_media_type", "pci.alias_not_found"
SERVER = '{"server": {"name": "vm"}}'

# POST /servers: (case, request, status, code)
BODY_CASES = [
    # bodies that are not JSON objects
    ("malformed JSON", _raw("{bad"), 400, MALFORMED),
    ("truncated JSON", _raw(SERVER[:-2]), 400, MALFORMED),
    ("not UTF-8", _raw(b'{"server": {"name": "\xff"}}'), 400, MALFORMED),
    ("nested 100000 deep", _raw("[" * 100000 + "]" * 100000), 400, MALFORMED),
    ("a key twice", _raw('{"server": {"name": "a", "name": "b"}}'), 400, MALFORMED),
    ("an unpaired surrogate", _raw('{"server": {"name": "\\ud800"}}'), 400, MALFORMED),
    ("JSON null", _raw("null"), 400, INVALID),
    ("a JSON list", _raw(f"[{SERVER}]"), 400, INVALID),
    ("a JSON string", _raw('"vm"'), 400, INVALID),
    ("text/plain", _raw(SERVER, "text/plain"), 415, MEDIA),
    ("no content type", {"data": SERVER}, 415, MEDIA),
    ("a form", {"data": {"name": "vm"}}, 415, MEDIA),
    ("over 1 MiB", _json({"pad": "x" * 2**20}), 413, "http.413"),
    # fields of the wrong type or out of range
    ("name a number", _json({"name": 7}), 400, INVALID),
    ("name of 256 characters", _json({"name": "é" * 256}), 400, INVALID),
    ("name with a NUL", _json({"name": "v\x00m"}), 400, INVALID),
    ("name with a newline", _json({"name": "v\nm"}), 400, INVALID),
    ("vcpus a string", _json({"vcpus": "2"}), 400, INVALID),
    ("vcpus a fraction", _json({"vcpus": 2.5}), 400, INVALID),
    ("vcpus a boolean", _json({"vcpus": True}), 400, INVALID),
    ("vcpus infinite", _raw('{"server": {"name": "vm", "vcpus": 1e400}}'), 400, INVALID),
    ("vcpus NaN", _raw('{"server": {"name": "vm", "vcpus": NaN}}'), 400, INVALID),
    ("memory_mb negative", _json({"memory_mb": -1}), 400, INVALID),
    ("memory_mb past 64 bits", _json({"memory_mb": 2**64}), 400, INVALID),
    ("root_gb huge", _json({"root_gb": 10**30}), 400, INVALID),
    ("numa_cells negative", _json({"numa_cells": [-1]}), 400, INVALID),
    ("numa_cells repeated", _json({"numa_cells": [0, 0]}), 400, INVALID),
    ("numa_cells empty", _json({"numa_cells": []}), 400, INVALID),
    # PCI requests, as text
    ("count past 64 bits", _json({"pci_requests": "gpu:99999999999999999999"}), 400, PCI),
    ("count above 64", _json({"pci_requests": "gpu:65"}), 400, PCI),
    ("count negative", _json({"pci_requests": "gpu:-1"}), 400, PCI),
    ("no count", _json({"pci_requests": "gpu"}), 400, PCI),
    ("an empty item", _json({"pci_requests": "gpu:1,,vf:1"}), 400, PCI),
    ("blank", _json({"pci_requests": "  "}), 400, PCI),
    ("1025 characters", _json({"pci_requests": "g" * 1023 + ":1"}), 400, INVALID),
    ("a NUL", _json({"pci_requests": "gpu:1\x00"}), 400, INVALID),
    ("a unicode alias", _json({"pci_requests": "gpü:1"}), 400, NO_ALIAS),
    # PCI requests, as a list
    ("17 items", _json({"pci_requests": [{"alias": "gpu", "count": 1}] * 17}), 400, INVALID),
    ("an empty list", _json({"pci_requests": []}), 400, INVALID),
    ("count a string", _json({"pci_requests": [{"alias": "gpu", "count": "1"}]}), 400, INVALID),
    ("count 65 in a list", _json({"pci_requests": [{"alias": "gpu", "count": 65}]}), 400, INVALID),
    (
        "an item key too many",
        _json({"pci_requests": [{"alias": "gpu", "count": 1, "x": 1}]}),
        400,
        INVALID,
    ),
    ("an unknown alias", _json({"pci_requests": [{"alias": "fpga", "count": 1}]}), 400, NO_ALIAS),
]

# (case, method, path, status, code)
PATH_CASES = [
    (
        "hypervisor past 64 bits",
        "get",
        "/hypervisors/99999999999999999999",
        404,
        "hypervisor.not_found",
    ),
    ("tree past 32 bits", "get", "/hypervisors/2147483648/pci-tree", 404, "hypervisor.not_found"),
    (
        "device past 64 bits",
        "get",
        "/pci-devices/99999999999999999999",
        404,
        "pci_device.not_found",
    ),
    ("hypervisor negative", "get", "/hypervisors/-1", 404, "http.404"),
    ("hypervisor a word", "get", "/hypervisors/abc", 404, "http.404"),
    ("server not a uuid", "get", "/servers/not-a-uuid", 404, "http.404"),
    ("delete of no uuid", "delete", "/servers/not-a-uuid", 404, "http.404"),
    ("a filter twice", "get", "/pci-devices?host=a&host=b", 400, INVALID),
    ("a NUL in a filter", "get", "/pci-devices?host=%00", 400, INVALID),
    ("a host of 256", "get", "/pci-devices?host=" + "h" * 256, 400, INVALID),
    ("server of 36 non-uuid", "get", f"/pci-devices?server={SERVER_ID[:-1]}g", 400, INVALID),
    ("an empty status", "get", "/pci-devices?status=", 400, INVALID),
    ("a node id past 32 bits", "get", "/pci-devices?compute_node_id=2147483648", 400, INVALID),
    ("a node id negative", "get", "/pci-devices?compute_node_id=-1", 400, INVALID),
    ("a node id of 5000 digits", "get", "/pci-devices?compute_node_id=" + "9" * 5000, 400, INVALID),
    ("a node id in words", "get", "/pci-devices?compute_node_id=one", 400, INVALID),
    ("a node id with a sign", "get", "/pci-devices?compute_node_id=%2B1", 400, INVALID),
    ("POST to a collection of GETs", "post", "/hypervisors", 405, "http.405"),
    ("DELETE of the collection", "delete", "/servers", 405, "http.405"),
]

# Every case as (case, method, path, request, status, code).
API_CASES = [
    *(
        (case, "post", "/servers", request, status, code)
        for case, request, status, code in BODY_CASES
    ),
    *((case, method, path, {}, status, code) for case, method, path, status, code in PATH_CASES),
]


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory) as running:
        yield running


@pytest.fixture
def client(plane):
    return api_server.app(plane).test_client()


@pytest.mark.parametrize(
    ("method", "path", "request_", "status", "code"),
    [case[1:] for case in API_CASES],
    ids=[case[0] for case in API_CASES],
)
def test_a_bad_request_gets_its_status_and_code_and_writes_nothing(
    client, method, path, request_, status, code
):
    before = api_server.database_rows()

    response = getattr(client, method)(path, **request_)

    assert (response.status_code, response.json["error"]["code"]) == (status, code)
    assert "Traceback" not in response.json["error"]["message"]
    assert api_server.database_rows() == before


def test_a_unicode_name_is_kept_as_given(client, plane):
    name = "vm-é☃😀-名前"
    response = client.post(
        "/servers",
        data=json.dumps({"server": {"name": name}}),
        content_type="application/json; charset=utf-8",
    )

    assert response.status_code == 202
    server_id = response.json["server"]["id"]
    plane.wait_for(server_id)
    assert client.get(f"/servers/{server_id}").json["server"]["name"] == name
