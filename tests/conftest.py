# ruff: noqa: E402 (the backend is selected before most imports: see the NOTE below)

import os

import pytest

from pcisim import concurrency

# NOTE: importing pcisim selects nothing; the suite runs on the threading backend (or
# PCISIM_CONCURRENCY's), which must be selected before anything imports oslo.messaging.
concurrency.select_backend()

# isort: split
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import rpc, testing
from pcisim.db import engine
from tests import backends


@pytest.fixture(scope="session", params=backends.BACKENDS)
def database(request, tmp_path_factory):
    """A fresh, migrated database on each backend, shared by the tests of a run."""
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def db(database):
    """The DB API pointed at an empty database of each backend."""
    database.empty()
    reset = engine.context_manager.patch_factory(database.manager)
    yield database
    reset()


@pytest.fixture
def ctxt():
    return pcisim_context.get_admin_context()


RABBIT_URL = os.environ.get("PCISIM_TEST_RABBIT_URL", "rabbit://guest:guest@127.0.0.1:5672/")
TRANSPORT_URLS = {"memory": pcisim_conf.IN_PROCESS_TRANSPORT_URL, "rabbit": RABBIT_URL}


@pytest.fixture(scope="session", autouse=True)
def config():
    """pcisim's options, registered and parsed with no configuration file."""
    pcisim_conf.parse_args([], default_config_files=[])
    # Queues named after per-test topics must not pile up on a shared broker, and an
    # exchange of our own keeps them apart from queues of other settings.
    pcisim_conf.CONF.set_override("amqp_auto_delete", True, group="oslo_messaging_rabbit")
    pcisim_conf.CONF.set_override("control_exchange", "pcisim_test")
    return pcisim_conf.CONF


@pytest.fixture(scope="session")
def rabbit_url(config):
    """RabbitMQ, with the test exchange held for the whole run.

    The tests' exchange auto-deletes with its last queue (so runs leave nothing on
    the broker); a queue bound for the run keeps it while a test has no server up,
    so that a call to a stopped conductor times out as it does in production.
    """
    if not backends.port_open(RABBIT_URL):
        backends.unavailable(f"RabbitMQ unreachable at {rpc.safe_url(RABBIT_URL)}")
    with backends.exchange_anchor(RABBIT_URL, config.control_exchange):
        yield RABBIT_URL


@pytest.fixture(scope="session", params=sorted(TRANSPORT_URLS))
def transport_url(request):
    """Each real transport: in-process kombu, and RabbitMQ when reachable."""
    if request.param == "rabbit":
        return request.getfixturevalue("rabbit_url")
    return TRANSPORT_URLS[request.param]


@pytest.fixture(scope="session")
def running_conductor(transport_url, config):
    """A conductor on each transport, started once: stopping one takes a second."""
    running = testing.InProcessConductor(transport_url).start()
    yield running
    running.stop()


@pytest.fixture
def conductor(db, running_conductor):
    """The conductor on an empty database; this process acts as a compute."""
    running_conductor.calls.clear()
    with running_conductor.acting_as_compute():
        yield running_conductor
