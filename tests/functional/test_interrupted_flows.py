"""Builds and deletes that stop half-way end anyway: the compute's periodic run
finishes what no flow handles any more (``ComputeManager._finish_interrupted``).

In process, on SQLite: a conductor that stops answering is simulated by sending the
compute's object calls to a topic nobody serves (a real ``MessagingTimeout`` after
``rpc_response_timeout``), a lost message by a conductor that does not send it.
"""

import contextlib
import logging
import threading
import time
import types

import pytest

from pcisim import conf as pcisim_conf
from pcisim import exception, faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.conductor import rpcapi as conductor_rpcapi
from pcisim.objects import base as objects_base
from pcisim.objects.instance import Instance
from pcisim.objects.instance_fault import InstanceFaultList
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends, config_overrides
from tests.functional import flows

CONF = pcisim_conf.CONF
SPECS = DeviceSpecList.from_config(['{"vendor_id": "10de"}'])
ALIASES = parse_aliases(['{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}'])
HOST, NODE = "gpu-host", "gpu-node"
# How long an RPC call may take here, and so how long an unfinished flow is given.
RPC_TIMEOUT = 2


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def plane(db, caplog):
    caplog.set_level(logging.INFO, logger="pcisim.compute.manager")
    driver = SimulatedDriver.from_config([f"{NODE}=gpus=2"])
    with config_overrides.overridden(CONF, {("rpc_response_timeout", None): RPC_TIMEOUT}):
        with testing.ControlPlane({HOST: driver}, SPECS, ALIASES) as running:
            yield running


@contextlib.contextmanager
def _conductor_unanswering(plane):
    """While the block runs (and after, until it ends), object calls get no answer."""
    answering = objects_base.PcisimObject.indirection_api
    nobody = types.SimpleNamespace(
        conductor=types.SimpleNamespace(topic="nobody-serves-this"),
        upgrade_levels=types.SimpleNamespace(conductor=None),
    )
    objects_base.set_indirection_api(
        conductor_rpcapi.ConductorAPI(plane.conductor.client_transport, conf=nobody)
    )
    try:
        yield
    finally:
        objects_base.set_indirection_api(answering)


def _logged(caplog, text):
    return testing.wait_until(
        lambda: any(text in record.getMessage() for record in caplog.records),
        4 * RPC_TIMEOUT,
        f"{text!r} to be logged",
    )


def _state(plane, instance_uuid):
    """The instance's vm_state; "gone" once its row is soft-deleted."""
    try:
        return Instance.get_by_uuid(plane.context, instance_uuid).vm_state
    except exception.InstanceNotFound:
        return "gone"


def _settle(plane, instance_uuid, done):
    """Run the periodic task until the instance's state is in ``done``."""
    return testing.wait_until(
        lambda: plane.run_periodic(HOST) or _state(plane, instance_uuid) in done,
        4 * RPC_TIMEOUT,
        f"{instance_uuid} to be {' or '.join(done)}",
    )


def _faults(plane, instance_uuid):
    return [
        f.message for f in InstanceFaultList.get_by_instance_uuids(plane.context, [instance_uuid])
    ]


def test_a_build_whose_instance_save_gets_no_answer_ends_in_error_with_its_devices_freed(
    plane, caplog, monkeypatch
):
    driver, lost = plane.drivers[HOST], contextlib.ExitStack()
    spawn = driver.spawn

    def spawn_then_lose_the_conductor(*args, **kwargs):
        spawn(*args, **kwargs)
        lost.enter_context(_conductor_unanswering(plane))

    monkeypatch.setattr(driver, "spawn", spawn_then_lose_the_conductor)
    instance = plane.api.create(plane.context, "vm", pci_requests="gpu:1")
    _logged(caplog, f"Could not put {instance.uuid} in ERROR")  # nor save it ACTIVE
    lost.close()  # the conductor answers again

    _settle(plane, instance.uuid, ("error",))

    assert _faults(plane, instance.uuid)[0].startswith("BuildAbortException")
    assert flows.held_devices() == []
    assert driver.list_instances(NODE) == set()


def test_a_build_whose_message_was_lost_ends_in_error_and_a_late_one_is_dropped(
    plane, caplog, monkeypatch
):
    tasks = next(e for e in plane.conductor.service.endpoints if hasattr(e, "reschedule"))
    sending, lost = tasks.compute_rpcapi, []
    monkeypatch.setattr(
        tasks,
        "compute_rpcapi",
        types.SimpleNamespace(build_and_run_instance=lambda *a: lost.append(a)),
    )
    instance = plane.api.create(plane.context, "vm", pci_requests="gpu:2")
    testing.wait_until(lambda: lost, what="the build message")

    _settle(plane, instance.uuid, ("error",))
    sending.build_and_run_instance(*lost[0])  # it comes after all
    _logged(caplog, f"Dropping the late build of {instance.uuid}")

    assert _state(plane, instance.uuid) == "error"
    assert _faults(plane, instance.uuid)[0].startswith("BuildAbortException")
    assert flows.held_devices() == []
    assert plane.drivers[HOST].list_instances(NODE) == set()


def test_a_build_held_longer_than_a_call_may_take_is_not_taken_for_interrupted(plane):
    held, release = [], threading.Event()

    def hold(instance):
        held.append(instance.uuid)
        release.wait(timeout=30)

    with faults.inject(faults.BETWEEN_CLAIM_AND_ALLOCATE, hold):
        try:
            instance = plane.api.create(plane.context, "vm", pci_requests="gpu:1")
            testing.wait_until(lambda: held, what="the build to be held")
            past_grace = time.monotonic() + 2 * RPC_TIMEOUT
            testing.wait_until(
                lambda: plane.run_periodic(HOST) or time.monotonic() > past_grace,
                4 * RPC_TIMEOUT,
                "the grace to pass, the periodic task running",
            )
            assert _state(plane, instance.uuid) == "building"
        finally:
            release.set()

    assert plane.wait_for(instance.uuid) == "active"


def test_a_delete_stopped_before_its_soft_delete_is_finished_by_the_periodic_run(plane):
    instance_uuid, _ = plane.boot("vm", pci_requests="gpu:1")
    instance = Instance.get_by_uuid(plane.context, instance_uuid)
    instance.vm_state, instance.task_state = "deleted", None  # a local delete's first step
    instance.save()

    _settle(plane, instance_uuid, ("gone",))

    assert flows.held_devices() == []
    assert plane.drivers[HOST].list_instances(NODE) == set()


def test_a_free_that_got_no_answer_ends_its_allocation_with_the_next_save(plane, caplog):
    # NOTE: no periodic run between the boot and the delete, so the node's instances
    # are what they were at its last heal: only the free's own write can end it.
    instance_uuid, _ = plane.boot("vm", "gpu:1")
    lost = contextlib.ExitStack()

    def lose_the_conductor(instance):
        lost.enter_context(_conductor_unanswering(plane))

    with faults.inject(faults.AFTER_SOFT_DELETE, faults.once(lose_the_conductor)):
        plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
        _logged(caplog, "Exception during message handling")  # the free got no answer
    lost.close()
    assert flows.allocations_of(plane, instance_uuid)

    plane.run_periodic(HOST)

    assert flows.allocations_of(plane, instance_uuid) == {}
    assert flows.held_devices() == []


def _terminate(plane, instance):
    """Send ``instance``'s delete to its compute, as the API does once it decided to."""
    plane.api.compute_rpcapi.terminate_instance(plane.context, instance)


def test_a_delete_message_that_comes_after_the_delete_was_finished_releases_what_is_left(
    plane, caplog
):
    instance_uuid, _ = plane.boot("vm", "gpu:1")
    late = Instance.get_by_uuid(plane.context, instance_uuid)
    late.task_state = "deleting"
    late.save()
    Instance.get_by_uuid(plane.context, instance_uuid).destroy()  # finished meanwhile

    _terminate(plane, late)

    _logged(caplog, f"{instance_uuid} is deleted already")
    testing.wait_until(lambda: not flows.held_devices(), what="the devices freed")
    assert plane.drivers[HOST].list_instances(NODE) == set()


def test_a_delete_an_older_api_sent_unrecorded_is_recorded_before_the_guest_stops(
    plane, monkeypatch
):
    instance_uuid, _ = plane.boot("vm", "gpu:1")
    driver, seen = plane.drivers[HOST], []
    destroy = driver.destroy

    def recording_the_row(node, stopped_uuid):
        seen.append(Instance.get_by_uuid(plane.context, stopped_uuid).task_state)
        return destroy(node, stopped_uuid)

    monkeypatch.setattr(driver, "destroy", recording_the_row)

    _terminate(plane, Instance.get_by_uuid(plane.context, instance_uuid))

    testing.wait_until(lambda: _state(plane, instance_uuid) == "gone", what="the delete")
    assert seen[0] == "deleting"
