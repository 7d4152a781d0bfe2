"""Reading a trace back: which flow `pcisim trace` shows, and how it draws it."""

import json

import pytest

from pcisim import exception, trace_report

T0 = 1_700_000_000.0


def _record(request_id, at_ms, sender, receiver, kind, method, ms=1.0, outcome="ok", **details):
    return {
        "ts": T0 + at_ms / 1000,
        "request_id": request_id,
        "from": sender,
        "to": receiver,
        "kind": kind,
        "method": method,
        "ms": ms,
        "outcome": outcome,
        **details,
    }


BOOT = [
    _record("req-boot", 0, "client", "api", "http", "POST /servers", ms=30, status=202),
    _record("req-boot", 1, "api", "conductor", "call", "schedule_and_build_instances", ms=20),
    _record("req-boot", 15, "conductor", "compute-1", "cast", "build_and_run_instance", ms=0.5),
    _record(
        "req-boot",
        40,
        "compute-1",
        "conductor",
        "call",
        "object_class_action_versions",
        ms=5,
        version="1.0",
        object="PciDeviceList",
        object_method="save_batch",
        object_version="1.2",
    ),
]
POLL = [_record("req-poll", 50, "client", "api", "http", "GET /servers/x", ms=4, status=200)]
PERIODIC = [
    _record(
        "req-periodic",
        60,
        "compute-1",
        "conductor",
        "call",
        "object_class_action_versions",
        object="InstanceList",
        object_method="get_by_host_and_node",
    )
]


def _flows(*records):
    return trace_report.flows([record for group in records for record in group])


def test_records_are_grouped_into_flows_by_request_id_in_the_order_they_began():
    assert list(_flows(BOOT, POLL, PERIODIC)) == ["req-boot", "req-poll", "req-periodic"]


def test_the_last_flow_begun_by_a_change_is_shown_rather_than_later_polls_and_periodics():
    assert trace_report.pick(_flows(BOOT, POLL, PERIODIC), "f") == BOOT


def test_without_any_change_the_last_flow_is_shown():
    assert trace_report.pick(_flows(POLL, PERIODIC), "f") == PERIODIC


def test_a_flow_is_named_by_a_unique_prefix_of_its_request_id():
    assert trace_report.pick(_flows(BOOT, POLL), "f", "req-po") == POLL


def test_an_unknown_request_id_is_refused_as_not_found():
    with pytest.raises(exception.FlowNotFound, match="no flow req-nothing in f"):
        trace_report.pick(_flows(BOOT, POLL), "f", "req-nothing")


def test_a_prefix_of_several_request_ids_is_refused_with_the_ones_it_matches():
    with pytest.raises(
        exception.FlowAmbiguous, match="2 flows in f begin with req-: req-boot, req-poll"
    ):
        trace_report.pick(_flows(BOOT, POLL), "f", "req-")


def test_a_missing_file_says_to_start_with_trace(tmp_path):
    with pytest.raises(exception.TraceUnavailable, match="--trace"):
        trace_report.read(str(tmp_path / "trace.jsonl"))


def test_the_previous_part_is_read_first_and_a_line_cut_short_is_counted(tmp_path):
    path = tmp_path / "trace.jsonl"
    (tmp_path / "trace.jsonl.1").write_text(json.dumps(BOOT[0]) + "\n")
    path.write_text("".join(json.dumps(r) + "\n" for r in BOOT[1:]) + '{"ts": 1')
    records, unreadable = trace_report.read(str(path))
    assert records == BOOT
    assert unreadable == 1


def test_text_gives_each_message_its_offset_parties_object_method_and_duration():
    lines = trace_report.text(BOOT).splitlines()
    assert lines[0].startswith("flow req-boot: POST /servers, 4 messages")
    save = lines[4].split()
    assert save[:6] == ["40.0", "ms", "compute-1", "->", "conductor", "call"]
    assert save[6:9] == ["PciDeviceList.save_batch", "5.00", "ms"]
    assert "PciDeviceList 1.2" in lines[4]


def test_text_marks_a_message_that_failed_with_its_exception():
    failed = [_record("r", 0, "compute-1", "conductor", "call", "m", outcome="PciDeviceNotFound")]
    assert trace_report.text(failed).splitlines()[1].endswith("!! PciDeviceNotFound")


def test_mermaid_lists_client_api_and_conductor_first_then_computes_by_safe_names():
    lines = trace_report.mermaid(BOOT).splitlines()
    assert lines[:5] == [
        "sequenceDiagram",
        "    participant client",
        "    participant api",
        "    participant conductor",
        "    participant compute_1 as compute-1",
    ]


def test_mermaid_draws_a_cast_without_reply_and_replies_when_they_came_back():
    arrows = [line.strip() for line in trace_report.mermaid(BOOT).splitlines()[5:]]
    assert arrows == [
        "client->>api: POST /servers",
        "api->>conductor: schedule_and_build_instances",
        "conductor-)compute_1: build_and_run_instance",
        "conductor-->>api: 20.0 ms",
        "api-->>client: 202, 30.0 ms",
        "compute_1->>conductor: PciDeviceList.save_batch "
        "(object_class_action_versions, rpc 1.0, PciDeviceList 1.2)",
        "conductor-->>compute_1: 5.0 ms",
    ]


def test_mermaid_crosses_the_reply_that_carried_an_exception():
    failed = [_record("r", 0, "compute-1", "conductor", "call", "m", outcome="PciDeviceNotFound")]
    assert trace_report.mermaid(failed).splitlines()[-1].strip() == (
        "conductor--xcompute_1: PciDeviceNotFound, 1.0 ms"
    )


def test_a_summary_names_what_began_the_flow_and_its_span():
    assert trace_report.summary(BOOT) == {
        "request_id": "req-boot",
        "began": "POST /servers",
        "by": "client",
        "messages": 4,
        "ms": 45.0,
    }
