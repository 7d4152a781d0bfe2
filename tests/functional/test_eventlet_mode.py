"""The classic eventlet mode (``PCISIM_CONCURRENCY=eventlet``) runs the conductor pattern.

The mode is chosen when pcisim is first imported, so it is tested in a child process:
``tests/functional/eventlet_round_trip.py`` makes a compute-side round trip through an
in-process conductor on ``kombu+memory:////`` and a SQLite file, and reports it.
"""

import json

import pytest

from pcisim import concurrency
from tests.functional import processes


@pytest.fixture(scope="module")
def eventlet_report(tmp_path_factory):
    """What one round trip in a process started with ``PCISIM_CONCURRENCY=eventlet`` saw."""
    state_dir = tmp_path_factory.mktemp("eventlet")
    result = processes.run_module(
        "tests.functional.eventlet_round_trip",
        state_dir,
        cwd=state_dir,
        env=processes.environment(**{concurrency.ENV_VAR: concurrency.EVENTLET}),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_selecting_the_eventlet_mode_monkey_patches_and_selects_eventlet(eventlet_report):
    assert eventlet_report["thread_patched"] is True
    assert eventlet_report["backend"] == "EVENTLET"


def test_conductor_serves_with_the_eventlet_executor_in_eventlet_mode(eventlet_report):
    assert eventlet_report["executor"] == "eventlet"


def test_compute_side_creates_and_saves_through_the_conductor_in_eventlet_mode(eventlet_report):
    assert eventlet_report["stored_status"] == "claimed"
    assert eventlet_report["pending"] == []
    assert eventlet_report["calls"] == {
        "object_action.ComputeNode.create": 1,
        "object_action.PciDevice.save": 2,
        "object_class_action_versions.PciDevice.get_by_dev_addr": 1,
    }


def test_unknown_concurrency_mode_stops_a_service_naming_it_and_the_choices(tmp_path):
    result = processes.run_python(
        "-c",
        "from pcisim.cmd import conductor; conductor.main(['--help'])",
        cwd=tmp_path,
        env=processes.environment(**{concurrency.ENV_VAR: "gevent"}),
    )

    assert result.returncode == 1
    assert result.stderr.startswith("pcisim-conductor: ")
    assert "Traceback" not in result.stderr
    assert "PCISIM_CONCURRENCY='gevent' is not a concurrency mode" in result.stderr
    assert "choose 'threading' (the default) or 'eventlet'" in result.stderr
