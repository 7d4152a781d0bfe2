"""schemathesis against /openapi.json, on a control plane whose servers hold PCI devices.

Whatever it sends, the answer conforms to the document (a documented status and
content type, a body of the declared schema) and is no 5xx, and what the document
calls invalid is refused. Random ids name nothing, so every view is also checked on
the servers, hypervisors and devices that are there.
"""

import itertools

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from pcisim.api import app, openapi
from pcisim.api.nova import images
from tests.functional import api_server

EXAMPLES = {GenerationMode.POSITIVE: 20, GenerationMode.NEGATIVE: 10}
GPU_FLAVOR = {
    "flavorid": "gpu",
    "name": "gpu",
    "memory_mb": 512,
    "vcpus": 1,
    "root_gb": 1,
    "ephemeral_gb": 0,
    "swap": 0,
    "is_public": True,
    "disabled": False,
    "description": None,
}
GPU_SPECS = {"pci_passthrough:alias": "gpu:1"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """One node of two NUMA nodes: two GPUs and a PF with two VFs. One server holds a
    GPU, one a VF (so its PF is unavailable), and one asked for more GPUs than there
    are and is in ERROR with a fault. A flavor "gpu" asks for a GPU."""
    node = "node1=gpus=2,pfs=1,vfs_per_pf=2,numa_nodes=2"
    with api_server.sqlite_plane(tmp_path_factory, node) as running:
        for pci_requests, state in (("gpu:1", "active"), ("vf:1", "active"), ("gpu:3", "error")):
            assert running.boot(pci_requests=pci_requests)[1] == state
        running.api.create_flavor(running.context, extra_specs=GPU_SPECS, **GPU_FLAVOR)
        yield running


@pytest.fixture(scope="module")
def api_schema(plane):
    return schemathesis.openapi.from_wsgi("/openapi.json", plane.wsgi_app())


def _operations(schema):
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(app.ROUTES) + len(app.NOVA_ROUTES)
    return operations


def _conforms(case):
    case.call_and_validate(excluded_checks=api_server.NOT_APPLICABLE_CHECKS)


def _takes_input(operation):
    """Whether some value the operation takes can be invalid. NOTE: a path segment of
    any text (a Nova flavor id) has no invalid value a URL can carry."""
    checked = [
        parameter
        for parameter in operation.path_parameters
        if parameter.definition["schema"] != openapi.CONVERTERS["string"]
    ]
    return bool(checked or operation.query or operation.body)


@pytest.mark.parametrize("mode", list(EXAMPLES), ids=str)
def test_every_answer_to_generated_requests_conforms_to_the_document(api_schema, mode):
    for operation in _operations(api_schema):
        if mode is GenerationMode.NEGATIVE and not _takes_input(operation):
            continue

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES[mode],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def conforms(case):
            _conforms(case)

        conforms()


def _existing(plane):
    """The values of each path parameter that name something there, as the API lists them."""
    client = plane.wsgi_app().test_client()
    servers = client.get("/servers").json["servers"]
    devices = client.get("/pci-devices").json["pci_devices"]
    assert servers and devices and any(device["server"] for device in devices)
    return {
        "server_id": [server["id"] for server in servers],
        "node_id": [node["id"] for node in client.get("/hypervisors").json["hypervisors"]],
        "device_id": [device["id"] for device in devices],
        "flavor_id": [GPU_FLAVOR["flavorid"]],
        "hypervisor_id": [
            str(node["id"]) for node in client.get("/v2.1/os-hypervisors").json["hypervisors"]
        ],
        "image_ref": [images.image_id(name) for name in images.CONF.api.images],
        "key": list(GPU_SPECS),
    }


def test_every_answer_about_what_is_there_conforms_to_the_document(api_schema, plane):
    existing = _existing(plane)
    # NOTE: no create, which needs a body, and the deletes last, as they take away
    # what the others name.
    operations = sorted(
        (op for op in _operations(api_schema) if op.method.upper() != "POST"),
        key=lambda op: op.method.upper() == "DELETE",
    )
    for operation in operations:
        names = [parameter.name for parameter in operation.path_parameters]
        for values in itertools.product(*(existing[name] for name in names)):
            _conforms(operation.Case(path_parameters=dict(zip(names, values, strict=True))))
