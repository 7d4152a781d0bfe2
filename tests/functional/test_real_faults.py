"""Faults with real servers: one conductor, two computes and the API as processes on
RabbitMQ and MariaDB, while the broker restarts, the conductor or a compute is killed,
or archiving runs; and services that cannot reach their database at all.

Storms are clients booting and deleting servers through the HTTP API
(``tests.functional.storm``); what must hold once they are over is read from the
database. Exact moments come from ``processes.Gate``: a compute's flow held at an
injection point while a process is killed. The processes are shared by the tests;
each test leaves them running and the cloud empty.
"""

import concurrent.futures
import contextlib
import shutil
import socket
import subprocess
import threading
import uuid

import pytest

from pcisim import context as pcisim_context
from pcisim import dbaccess, faults, testing
from pcisim.db import archive, engine
from tests import backends
from tests.conftest import RABBIT_URL
from tests.functional import flows, processes, storm

REQUESTS = ["gpu:1", "vf:1", "vf:2", "gpu:2"]
RPC_TIMEOUT = 5  # [DEFAULT] rpc_response_timeout: a call to a dead conductor fails in 5 s
PERIODIC = 2  # [compute] update_resources_interval
# Interrupted flows end within the grace (one RPC timeout) and two periodic runs; a
# conductor that starts again takes a few seconds more.
SETTLE_TIMEOUT = 60
STORM_CLIENTS = 4
REQUESTS_AROUND_A_FAULT = 8


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """MariaDB, shared by the processes and read directly by the tests."""
    scratch = backends.ScratchDatabase("mysql", tmp_path_factory)
    reset = engine.context_manager.patch_factory(scratch.manager)
    yield scratch
    reset()
    scratch.drop()


@pytest.fixture(scope="session")
def anchors():
    """Exchange anchors taken after a broker restart, held to the end of the run."""
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture(scope="module")
def broker(rabbit_url, config, anchors):
    """A context manager during which RabbitMQ's application is stopped."""
    rabbitmqctl = shutil.which("rabbitmqctl")
    if rabbitmqctl is None:
        backends.unavailable("rabbitmqctl is not on the PATH: the broker cannot be restarted")

    @contextlib.contextmanager
    def stopped():
        subprocess.run([rabbitmqctl, "stop_app"], check=True, capture_output=True, timeout=60)
        try:
            yield
        finally:
            subprocess.run([rabbitmqctl, "start_app"], check=True, capture_output=True, timeout=60)
            # The run's exchange anchor (tests/conftest.py) went with the restart.
            anchors.enter_context(backends.exchange_anchor(rabbit_url, config.control_exchange))

    return stopped


def _config(directory, name, connection=None, **sections):
    """A process's configuration, with timeouts short enough for faults to show fast."""
    options = {
        "DEFAULT": {"rpc_response_timeout": RPC_TIMEOUT, "report_interval": 1},
        "compute": {"update_resources_interval": PERIODIC},
    }
    for section, values in sections.items():
        options.setdefault(section, {}).update(values)
    return processes.cloud_config(directory, name, RABBIT_URL, connection, **options)


@pytest.fixture(scope="module")
def processes_(database, rabbit_url, tmp_path_factory):
    """Conductor, compute-1 (4 GPUs), compute-2 (2 PFs of 4 VFs) and the API."""
    directory = tmp_path_factory.mktemp(f"run{uuid.uuid4().hex[:8]}")

    def compute(host, inventory):
        config = _config(directory, host, DEFAULT={"host": host}, compute={"inventory": inventory})
        gates = directory / f"gates-{host}"
        gates.mkdir()
        return processes.PausingComputeProcess(config, gates)

    services = {
        "conductor": processes.ConductorProcess(_config(directory, "conductor", database.url)),
        "compute-1": compute("compute-1", "gpu-node=gpus=4"),
        "compute-2": compute("compute-2", "nic-node=pfs=2,vfs_per_pf=4"),
        "api": processes.ApiProcess(_config(directory, "api")),
    }
    try:
        services["conductor"].start()
        with concurrent.futures.ThreadPoolExecutor() as starting:
            others = [services[name] for name in ("compute-1", "compute-2", "api")]
            for started in [starting.submit(service.start) for service in others]:
                started.result()
        yield services
    finally:
        for name, service in services.items():
            service.kill()
            (directory / f"{name}.log").write_text(service.output)


@pytest.fixture
def cloud(processes_, database):
    """The shared processes, all running, with no server left when the test ends."""
    for service in processes_.values():
        if not service.running():
            service.restart()
    yield processes_
    for host in ("compute-1", "compute-2"):
        for point in faults.POINTS:
            processes_[host].gate(point).disarm()
            processes_[host].gate(point).release()
    for service in processes_.values():
        if not service.running():
            service.restart()
    _delete_every_server(processes_["api"].url)
    _settled(database)


# ------------------------------------------------------------------------ helpers


def _delete_every_server(api):
    status, body = storm.http("GET", f"{api}/servers")
    assert status == 200, body
    for server in body["servers"]:
        storm.http("DELETE", f"{api}/servers/{server['id']}")
    testing.wait_until(
        lambda: (
            (listed := storm.http("GET", f"{api}/servers"))[0] == 200 and listed[1]["servers"] == []
        ),
        SETTLE_TIMEOUT,
        "every server to be deleted",
    )


def _settled(database):
    """Wait until nothing is wrong (``storm.problems``); fail naming what stays wrong."""
    engine_ = database.manager.writer.get_engine()
    try:
        testing.wait_until(lambda: not storm.problems(engine_), SETTLE_TIMEOUT, "settling")
    except TimeoutError:
        pytest.fail("\n".join(["not settled:", *storm.problems(engine_)]), pytrace=False)


def _boot(api, request):
    """Create a server; its id, while its build goes on."""
    status, body = storm.http(
        "POST", f"{api}/servers", {"server": {"name": "vm", "pci_requests": request}}
    )
    assert status == 202, body
    return body["server"]["id"]


def _server(api, server_id):
    """The server's view, None once it is deleted."""
    status, body = storm.http("GET", f"{api}/servers/{server_id}")
    assert status in (200, 404), body
    return body["server"] if status == 200 else None


def _wait_for_status(api, server_id, statuses, timeout=SETTLE_TIMEOUT):
    return testing.wait_until(
        lambda: (s := _server(api, server_id)) is not None and s["status"] in statuses and s,
        timeout,
        f"server {server_id} to be {' or '.join(statuses)}",
    )


def _wait_gone(api, server_id, timeout=SETTLE_TIMEOUT):
    testing.wait_until(
        lambda: _server(api, server_id) is None, timeout, f"server {server_id} to be gone"
    )


def _storm_with_fault(cloud, database, fault):
    """Run a storm, ``fault()`` once enough boots were accepted, then as many more.

    Returns the tally once every client finished and the cloud settled; every boot
    accepted must have ended (ACTIVE or ERROR) and every server must have gone.
    """
    with storm.Storm(lambda: cloud["api"].url, REQUESTS, clients=STORM_CLIENTS) as running:
        running.wait_for_requests(REQUESTS_AROUND_A_FAULT)
        fault()
        running.wait_for_requests(len(running.tally.servers) + REQUESTS_AROUND_A_FAULT, 120)
    tally = running.stop()
    _settled(database)
    ended, fault_kinds = storm.outcomes(database.manager.writer.get_engine(), tally.servers)
    print(f"storm: {tally}; instances: {dict(ended)}; faults: {dict(fault_kinds)}")
    assert tally.counts["boot ended unseen"] == 0, tally
    assert tally.counts["delete not seen to end"] == 0, tally
    assert set(ended) == {"deleted"}, ended
    return tally


def _held_by(server_id):
    return flows.devices(instance_uuid=server_id)


def _released(server_id):
    """Whether nothing is held for the server: no device, no allocation."""
    return not _held_by(server_id) and not flows.allocations(consumer_uuid=server_id)


# ----------------------------------------------------------------- broker restart


def test_a_broker_restart_mid_storm_ends_every_request_and_leaks_no_device(cloud, broker, database):
    servers = [cloud[name] for name in ("conductor", "compute-1", "compute-2")]

    def restart_rabbitmq():
        marks = [service.mark() for service in servers]
        with broker():
            for service, mark in zip(servers, marks, strict=True):
                service.wait_for("is unreachable", 30, since=mark)
        for service, mark in zip(servers, marks, strict=True):
            service.wait_for("Reconnected to AMQP server", 60, since=mark)

    _storm_with_fault(cloud, database, restart_rabbitmq)


# ------------------------------------------------------------ conductor killed


def test_a_conductor_killed_mid_storm_ends_every_request_and_leaks_no_device(cloud, database):
    _storm_with_fault(cloud, database, cloud["conductor"].restart)


def test_device_changes_a_compute_could_not_save_reach_the_database_once_the_conductor_is_back(
    cloud,
):
    api, compute = cloud["api"].url, cloud["compute-2"]
    server_id = _boot(api, "vf:2")
    _wait_for_status(api, server_id, ["ACTIVE"])
    gate = compute.gate(faults.AFTER_SOFT_DELETE).arm()
    storm.http("DELETE", f"{api}/servers/{server_id}")
    assert gate.wait_reached() == server_id  # soft-deleted, its VFs not freed yet
    cloud["conductor"].kill()
    mark = compute.mark()
    gate.release()
    # the free's save got no answer (the periodic runs log their own failures)
    compute.wait_for("Exception during message handling", 3 * RPC_TIMEOUT, since=mark)
    assert {d["status"] for d in _held_by(server_id)} == {"allocated"}

    cloud["conductor"].start()

    testing.wait_until(lambda: _released(server_id), SETTLE_TIMEOUT, "the VFs released")


def test_a_build_that_loses_the_conductor_ends_in_error_with_its_devices_freed(cloud):
    api, compute = cloud["api"].url, cloud["compute-1"]
    gate = compute.gate(faults.BETWEEN_CLAIM_AND_ALLOCATE).arm()
    server_id = _boot(api, "gpu:1")
    gate.wait_reached()
    cloud["conductor"].kill()
    mark = compute.mark()
    gate.release()
    # the allocation cannot be saved, nor the ERROR recorded: all is left as it is
    compute.wait_for(f"Could not put {server_id} in ERROR", 4 * RPC_TIMEOUT, since=mark)

    cloud["conductor"].start()

    server = _wait_for_status(api, server_id, ["ERROR"])
    assert server["fault"]["message"].startswith("BuildAbortException"), server
    testing.wait_until(lambda: _released(server_id), SETTLE_TIMEOUT, "the GPU released")


# --------------------------------------------------------------- compute killed


def test_a_compute_killed_mid_build_ends_the_build_in_error_when_it_restarts(cloud):
    api, compute = cloud["api"].url, cloud["compute-1"]
    gate = compute.gate(faults.BETWEEN_CLAIM_AND_ALLOCATE).arm()
    server_id = _boot(api, "gpu:2")
    gate.wait_reached()  # two GPUs claimed in the compute, the scheduler's allocation kept
    compute.kill()
    assert _held_by(server_id) == []
    assert flows.allocations(consumer_uuid=server_id)

    compute.start()

    server = _wait_for_status(api, server_id, ["ERROR"])
    assert server["fault"]["message"].startswith("BuildAbortException"), server
    testing.wait_until(lambda: _released(server_id), SETTLE_TIMEOUT, "the GPUs released")
    assert _wait_for_status(api, _boot(api, "gpu:4"), ["ACTIVE", "ERROR"])["status"] == "ACTIVE"


def test_a_compute_killed_mid_delete_finishes_the_delete_when_it_restarts(cloud):
    api, compute = cloud["api"].url, cloud["compute-2"]
    server_id = _boot(api, "vf:2")
    _wait_for_status(api, server_id, ["ACTIVE"])
    gate = compute.gate(faults.AFTER_SOFT_DELETE).arm()
    storm.http("DELETE", f"{api}/servers/{server_id}")
    gate.wait_reached()  # soft-deleted, its VFs still allocated
    compute.kill()

    compute.start()

    _wait_gone(api, server_id)
    testing.wait_until(lambda: _released(server_id), SETTLE_TIMEOUT, "the VFs released")


def test_a_build_whose_message_was_lost_ends_in_error_once_its_compute_is_back(cloud):
    api, compute = cloud["api"].url, cloud["compute-1"]
    compute.kill()  # its queue goes with it; the scheduler still counts it up

    server_id = _boot(api, "gpu:1")
    compute.start()

    server = _wait_for_status(api, server_id, ["ERROR"])
    assert server["fault"]["message"].startswith("BuildAbortException"), server


def test_a_delete_whose_message_was_lost_is_finished_once_its_compute_is_back(cloud):
    api, compute = cloud["api"].url, cloud["compute-2"]
    server_id = _boot(api, "vf:1")
    _wait_for_status(api, server_id, ["ACTIVE"])
    compute.kill()  # its queue goes with it; the API still counts it up

    assert storm.http("DELETE", f"{api}/servers/{server_id}")[0] == 204
    compute.start()

    _wait_gone(api, server_id, timeout=3 * RPC_TIMEOUT + 2 * PERIODIC)


# ------------------------------------------------------------------- archiving


def test_archiving_during_a_storm_loses_no_update_and_adds_no_blank_row(cloud, database):
    stop, archived, errors = threading.Event(), [], []

    def archive_until_stopped():
        context = pcisim_context.get_admin_context()
        while not stop.is_set():
            try:
                with dbaccess.granted():
                    archived.append(archive.archive_deleted_rows(context, max_rows=50).total)
            except Exception as error:
                errors.append(error)

    archiver = threading.Thread(target=archive_until_stopped, daemon=True)
    archiver.start()
    try:
        _storm_with_fault(cloud, database, lambda: None)
    finally:
        stop.set()
        archiver.join(timeout=60)
    print(f"archive runs: {len(archived)}, rows archived: {sum(archived)}")
    assert errors == []
    assert sum(archived) > 0
    assert flows.rows_missing_identity() == []
    for service in cloud.values():
        assert "Deadlock found" not in service.output
        assert "Lock wait timeout" not in service.output


# ------------------------------------------------------- unreachable database


def _closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _unreachable_database_config(tmp_path):
    url = f"mysql+pymysql://root@127.0.0.1:{_closed_port()}/pcisim"
    return processes.write_config(tmp_path / "pcisim.conf", {"database": {"connection": url}})


def _one_line_after_bounded_retries(result, first_words):
    """The one line of ``result``'s that begins with ``first_words``, which must end its
    error output, after three retries and no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output
    assert output.count("SQL connection failed") == 3, output  # [database] max_retries
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(first_words), result.stderr
    return last


def test_a_conductor_whose_database_is_unreachable_exits_with_one_line_after_bounded_retries(
    tmp_path,
):
    result = processes.run_conductor(_unreachable_database_config(tmp_path))

    line = _one_line_after_bounded_retries(result, "pcisim-conductor: cannot reach the database")
    assert "Connection refused" in line, line


def test_pcisim_manage_with_an_unreachable_database_exits_with_one_line_after_bounded_retries(
    tmp_path,
):
    config = _unreachable_database_config(tmp_path)
    result = subprocess.run(
        [
            str(processes.console_script("pcisim-manage")),
            "--config-file",
            str(config),
            "db",
            "archive_deleted_rows",
        ],
        capture_output=True,
        text=True,
        timeout=processes.RUN_TIMEOUT,
        env=processes.environment(),
        cwd=tmp_path,
    )

    _one_line_after_bounded_retries(result, "Cannot reach the database")
    assert result.returncode == 3  # nova-manage's "database unreachable" for archiving
