"""Every log line carries the request id of what it was logged for (issue 12).

Two DELETEs go through the HTTP API of an in-process control plane; oslo.log's
ContextFormatter stamps each line with the thread's current context, as in a
deployment's log files. Grepping by the id a response returned finds that request's
lines in the API, the conductor and the compute, and no line of the other request.
"""

import dataclasses
import logging
import threading
import time

import pytest
from oslo_log import formatters

from pcisim import testing, trace
from pcisim.compute.driver import SimulatedDriver
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends

REQUEST_ID_HEADER = "X-OpenStack-Request-ID"
SPECS = DeviceSpecList.from_config(['{"vendor_id": "10de"}'])
ALIASES = parse_aliases(['{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}'])
# NOTE: oslo.messaging logs that it took a message before the message's context is
# rebuilt, so that line still carries the previous dispatch's id on its thread.
BEFORE_THE_CONTEXT = "Receive incoming message"


@dataclasses.dataclass(frozen=True)
class Line:
    actor: str
    thread: int
    request_id: str
    message: str


class Lines(logging.Handler):
    """Every line logged, with who logged it and the request id oslo.log gave it."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.setFormatter(formatters.ContextFormatter())
        self.lines = []

    def emit(self, record):
        self.format(record)  # NOTE: sets record.request_id from the current context
        message = record.getMessage()
        if not message.startswith(BEFORE_THE_CONTEXT):
            self.lines.append(
                Line(trace.actor(), record.thread, record.__dict__.get("request_id"), message)
            )

    def mark(self):
        return len(self.lines)

    def since(self, mark):
        return self.lines[mark:]

    def carrying(self, request_id):
        return [line for line in self.lines if line.request_id == request_id]

    def settle(self, request_id, quiet_seconds=0.3):
        """Wait until no new line has carried ``request_id`` for ``quiet_seconds``: the
        handlers of its flow have returned (a cast's may log after its effects show)."""

        def quiet():
            logged = len(self.carrying(request_id))
            time.sleep(quiet_seconds)
            return len(self.carrying(request_id)) == logged

        testing.wait_until(quiet, what=f"the lines of {request_id} to end")


@pytest.fixture
def lines():
    handler, root = Lines(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    from pcisim.db import engine

    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    reset = engine.context_manager.patch_factory(scratch.manager)
    drivers = {"compute-1": SimulatedDriver.from_config(["node1=gpus=2"])}
    with testing.ControlPlane(drivers, SPECS, ALIASES) as running:
        yield running
    reset()
    scratch.drop()


@pytest.fixture
def client(control_plane):
    return control_plane.wsgi_app().test_client()


def _boot(client, plane):
    response = client.post("/servers", json={"server": {"name": "vm", "pci_requests": "gpu:1"}})
    assert response.status_code == 202, response.json
    server_id = response.json["server"]["id"]
    assert plane.wait_for(server_id) == "active"
    return server_id


def _delete(client, plane, server_id):
    """DELETE ``server_id`` and wait until its whole flow is over; its request id."""
    response = client.delete(f"/servers/{server_id}")
    assert response.status_code == 204
    plane.wait_for(server_id, done=("deleted",))
    testing.wait_until(
        lambda: not client.get(f"/pci-devices?server={server_id}").json["pci_devices"],
        what="devices freed",
    )
    return response.headers[REQUEST_ID_HEADER]


def _actors(lines, request_id):
    return {line.actor for line in lines if line.request_id == request_id}


def test_each_delete_logs_under_its_own_request_id_in_api_conductor_and_compute(
    control_plane, client, lines
):
    first_server, second_server = _boot(client, control_plane), _boot(client, control_plane)

    first_id = _delete(client, control_plane, first_server)
    lines.settle(first_id)
    after_first = lines.mark()
    second_id = _delete(client, control_plane, second_server)

    assert first_id != second_id
    everyone = {"api", control_plane.conductor.topic, "compute-1"}
    assert _actors(lines.lines, first_id) >= everyone
    assert _actors(lines.lines, second_id) >= everyone
    assert not [line for line in lines.since(after_first) if line.request_id == first_id]
    assert not [line for line in lines.lines[:after_first] if line.request_id == second_id]


def test_a_periodic_task_logs_under_an_id_of_its_own(control_plane, client, lines):
    server_id = _boot(client, control_plane)
    request_id = _delete(client, control_plane, server_id)
    before = lines.mark()

    # NOTE: on the thread that served the request, as a reused waitress thread would.
    with trace.acting_as("compute-1"):
        control_plane.computes["compute-1"].periodic_update()

    here = threading.get_ident()
    periodic_ids = {line.request_id for line in lines.since(before) if line.thread == here}
    assert len(periodic_ids) == 1 and None not in periodic_ids
    assert request_id not in periodic_ids
    assert _actors(lines.since(before), periodic_ids.pop()) >= {control_plane.conductor.topic}
