"""Recording a trace: one JSON line per message, from the actor of the sending thread."""

import json
import threading

import pytest

from pcisim import context as pcisim_context
from pcisim import trace, trace_report


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "trace.jsonl"
    trace.start(str(path), default_actor="test-process")
    yield path
    trace.stop()


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _record(context, method="m"):
    trace.record(context, trace.actor(), "conductor", "call", method, 1.5, 0.002, "ok", topic="t")


def test_nothing_is_recorded_while_tracing_is_off(tmp_path):
    _record(pcisim_context.get_admin_context())
    assert trace.path() is None
    assert list(tmp_path.iterdir()) == []


def test_a_record_carries_the_request_id_of_its_context_and_drops_empty_details(recording):
    context = pcisim_context.get_admin_context()
    trace.record(context, "api", "conductor", "call", "m", 1.5, 0.002, "ok", server=None)
    assert _lines(recording) == [
        {
            "ts": 1.5,
            "request_id": context.request_id,
            "from": "api",
            "to": "conductor",
            "kind": "call",
            "method": "m",
            "ms": 2.0,
            "outcome": "ok",
        }
    ]


def test_a_thread_sends_as_the_process_default_until_it_acts_for_a_service(recording):
    assert trace.actor() == "test-process"
    with trace.acting_as("compute-1"):
        assert trace.actor() == "compute-1"
        with trace.acting_as("api"):
            assert trace.actor() == "api"
        assert trace.actor() == "compute-1"
    assert trace.actor() == "test-process"


def test_actors_are_per_thread(recording):
    seen = []
    with trace.acting_as("compute-1"):
        thread = threading.Thread(target=lambda: seen.append(trace.actor()))
        thread.start()
        thread.join()
    assert seen == ["test-process"]


def test_concurrent_writers_never_interleave_within_a_line(recording):
    context = pcisim_context.get_admin_context()
    threads = [
        threading.Thread(target=lambda: [_record(context, "x" * 500) for _ in range(200)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(_lines(recording)) == 800


def test_past_max_bytes_the_file_moves_to_its_previous_part_and_both_read_back(tmp_path):
    path = tmp_path / "trace.jsonl"
    trace.start(str(path), "p", max_bytes=1000)
    try:
        for n in range(12):
            _record(pcisim_context.get_admin_context(), f"m{n}")
    finally:
        trace.stop()
    assert path.stat().st_size <= 1000
    assert (tmp_path / "trace.jsonl.1").exists()
    records, _ = trace_report.read(str(path))
    assert [r["method"] for r in records][-1] == "m11"
    assert [r["method"] for r in records] == sorted(
        (r["method"] for r in records), key=lambda m: int(m[1:])
    )
