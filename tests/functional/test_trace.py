"""A traced control plane: each boot and delete is one flow, from the API to the conductor
to the compute and back, with every object call the compute makes for it."""

import pytest

from pcisim import testing, trace_report
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import rpcapi
from pcisim.objects.instance import Instance
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends

HOST = "gpu-host"
SPECS = DeviceSpecList.from_config(['{"vendor_id": "10de"}'])
ALIASES = parse_aliases(['{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}'])


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """The flows do not depend on the backend; SQLite is enough to trace them."""
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def plane(db, recording):
    drivers = {HOST: SimulatedDriver.from_config(["gpu-node=gpus=2"])}
    with testing.ControlPlane(drivers, SPECS, ALIASES) as running:
        yield running


def _flow_with(plane, path, method, until=None):
    """The one flow that has a message ``method`` (a method or Object.method), as
    (sender, receiver, kind, what), the test's conductor topic called ``conductor``.

    A caller records a call once its reply is in, a moment after the effect a test can
    wait for; ``until`` names the message to wait for."""
    flow = testing.wait_until(
        lambda: _recorded_flow_with(path, method, until or method),
        what=f"a traced flow with {method} and {until}",
    )
    named = {plane.conductor.topic: "conductor"}
    return [
        (named.get(r["from"], r["from"]), named.get(r["to"], r["to"]), r["kind"], _what(r))
        for r in flow
    ], flow


def _recorded_flow_with(path, method, until):
    records, unreadable = trace_report.read(path)
    assert unreadable == 0
    found = [
        flow
        for flow in trace_report.flows(records).values()
        if any(_what(record) == method for record in flow)
    ]
    assert len(found) <= 1, found
    return found and any(_what(record) == until for record in found[0]) and found[0]


def _what(record):
    if record.get("object_method"):
        return f"{record['object']}.{record['object_method']}"
    return record["method"]


def test_a_boot_is_one_flow_api_to_conductor_to_compute(plane, recording):
    plane.boot("vm", "gpu:1")
    messages, _ = _flow_with(
        plane, recording, "schedule_and_build_instances", "Instance.save_with_devices"
    )
    assert messages[:2] == [
        ("api", "conductor", "call", "schedule_and_build_instances"),
        ("conductor", HOST, "cast", "build_and_run_instance"),
    ]
    assert ("api", "conductor", "call", "schedule_and_build_instances") not in messages[2:]
    compute_calls = [what for sender, _, _, what in messages if sender == HOST]
    # the claim is written with the allocation, in one call: the devices allocated,
    # the node's usage and pools, the instance ACTIVE
    assert compute_calls == ["Instance.save_with_devices"]


def test_a_delete_is_one_flow_in_which_the_compute_frees_the_devices(plane, recording):
    instance_uuid, _ = plane.boot("vm", "gpu:1")
    plane.delete(instance_uuid)
    freed = "ComputeNode.save_with_devices"
    messages, _ = _flow_with(plane, recording, "terminate_instance", freed)
    assert messages[0] == ("api", "conductor", "call", "Instance.get_by_uuid")
    assert ("api", HOST, "cast", "terminate_instance") in messages
    compute_calls = [what for sender, _, _, what in messages if sender == HOST]
    # the API recorded the delete before it sent it: the compute's first write is the
    # soft-delete
    assert compute_calls == ["Instance.destroy", freed]


def test_each_message_names_its_rpc_and_object_versions_and_how_long_it_took(plane, recording):
    plane.boot("vm", "gpu:1")
    _, flow = _flow_with(
        plane, recording, "schedule_and_build_instances", "Instance.save_with_devices"
    )
    (save,) = [r for r in flow if _what(r) == "Instance.save_with_devices"]
    assert (save["method"], save["version"], save["object_version"]) == (
        "object_action",
        rpcapi.RPC_API_VERSION,
        Instance.VERSION,
    )
    assert save["ms"] > 0 and save["outcome"] == "ok"


def test_a_call_that_raised_is_recorded_with_the_exception_the_caller_got(plane, recording):
    # a new compute waits for its conductor, looks for its service record, and creates
    # it when told none exists
    messages, flow = _flow_with(plane, recording, "Service.create")
    assert messages[:2] == [
        (HOST, "conductor", "call", "oslo_rpc_server_ping"),
        (HOST, "conductor", "call", "Service.get_by_host_and_binary"),
    ]
    assert [r["outcome"] for r in flow[:3]] == ["ok", "ServiceNotFound", "ok"]


def test_a_periodic_run_is_a_flow_of_its_own_sent_by_the_compute(plane, recording):
    before = set(trace_report.flows(trace_report.read(recording)[0]))
    plane.run_periodic(HOST)
    after = trace_report.flows(trace_report.read(recording)[0])
    (new,) = [
        flow
        for request_id, flow in after.items()
        if request_id not in before and _what(flow[0]) != "Service.save"  # not a heartbeat
    ]
    assert {record["from"] for record in new} == {HOST}
    assert _what(new[0]) == "InstanceList.get_by_host_and_node"
