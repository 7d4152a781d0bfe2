"""Services as an operator's supervisor sees them: they stop on SIGTERM whatever the
broker does, and a compute either serves or exits, never lingers without serving.

Each service is a real process on RabbitMQ (or on a broker address where nothing
listens), started from an INI file as ``processes`` starts them; readiness is the
``READY=1`` a service sends on ``$NOTIFY_SOCKET`` as systemd asks.
"""

import contextlib
import signal
import socket
import uuid

import pytest

from pcisim import context as pcisim_context
from pcisim.objects.service import SERVICE_VERSION, Service
from tests import backends
from tests.functional import flows, processes

# A hang detector, not a timing: stopping takes well under a second here.
STOP_BOUND = 30


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """One SQLite file the processes share: the database is not what is tested here."""
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def directory(tmp_path):
    run = tmp_path / f"run{uuid.uuid4().hex[:8]}"
    run.mkdir()
    return run


def _closed_port_url():
    """A RabbitMQ URL on a loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"rabbit://guest:guest@127.0.0.1:{port}/"


def _compute(directory, transport_url, host="compute-1"):
    config = processes.cloud_config(
        directory,
        host,
        transport_url,
        DEFAULT={"host": host},
        compute={"inventory": "gpu-node=gpus=2"},
    )
    return processes.ComputeProcess(config)


@contextlib.contextmanager
def _launched(service):
    """``service`` started, not waited for; killed at the end, whatever happened."""
    try:
        yield service.launch()
    finally:
        service.kill()


def _stops_on_sigterm(service):
    assert service.terminate(timeout=STOP_BOUND) == 0, service.output


def test_a_conductor_whose_broker_is_away_stops_on_sigterm(db, directory):
    config = processes.cloud_config(directory, "conductor", _closed_port_url(), db.url)
    with _launched(processes.ConductorProcess(config)) as conductor:
        conductor.wait_for("waits for the message broker", processes.START_TIMEOUT)
        _stops_on_sigterm(conductor)


def test_a_compute_whose_broker_is_away_stops_on_sigterm(directory):
    with _launched(_compute(directory, _closed_port_url())) as compute:
        compute.wait_for("waits for the message broker", processes.START_TIMEOUT)
        _stops_on_sigterm(compute)


def test_a_compute_waiting_for_its_conductor_stops_on_sigterm(rabbit_url, directory):
    with _launched(_compute(directory, rabbit_url)) as compute:
        compute.wait_for("waits for the conductor", processes.START_TIMEOUT)
        _stops_on_sigterm(compute)


def test_a_compute_started_before_its_conductor_waits_then_serves_and_registers(
    db, rabbit_url, directory
):
    config = processes.cloud_config(
        directory, "conductor", rabbit_url, db.url, DEFAULT={"host": "conductor-1"}
    )
    with _launched(_compute(directory, rabbit_url)) as compute:
        compute.wait_for("waits for the conductor", processes.START_TIMEOUT)
        assert compute.running()
        with processes.ConductorProcess(config):
            # NOTE: it pings every CONDUCTOR_PING_TIMEOUT s; a bound to detect a hang.
            compute.wait_ready(timeout=60)
            ctxt = pcisim_context.get_admin_context()
            record = Service.get_by_host_and_binary(ctxt, "compute-1", "pcisim-compute")
            assert record.last_seen_up is not None
            # Both say which code they run, for pcisim-status upgrade check.
            assert record.version == SERVICE_VERSION
            conductor = Service.get_by_host_and_binary(ctxt, "conductor-1", "pcisim-conductor")
            assert conductor.version == SERVICE_VERSION
            assert len(flows.devices()) == 2
            _stops_on_sigterm(compute)


def test_sigusr2_dumps_every_threads_stack_to_the_log_and_the_service_runs_on(directory):
    with _launched(_compute(directory, _closed_port_url())) as compute:
        compute.wait_for("waits for the message broker", processes.START_TIMEOUT)
        mark = compute.mark()

        compute.process.send_signal(signal.SIGUSR2)

        compute.wait_for("(most recent call first)", processes.START_TIMEOUT, since=mark)
        # The main thread waits for signals; the service's start waits for the broker.
        compute.wait_for("in _supervise", processes.START_TIMEOUT, since=mark)
        compute.wait_for("in wait_for_broker", processes.START_TIMEOUT, since=mark)
        assert compute.running()
        _stops_on_sigterm(compute)
