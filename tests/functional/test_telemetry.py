"""OpenTelemetry traces of a boot through the HTTP API (``pcisim.telemetry``).

The control plane runs in this process on SQLite. Telemetry starts as a service starts
it (``[otel] enabled``), exporting over OTLP to a collector served here; the spans are
read from the SDK's in-memory exporter, added to the same tracer provider (which
OpenTelemetry sets once per process).
"""

import contextlib
import http.server
import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import export as otel_export
from opentelemetry.sdk.trace.export import in_memory_span_exporter

from pcisim import conf as pcisim_conf
from pcisim import telemetry
from pcisim.objects.instance import Instance
from pcisim.polling import wait_until
from tests import config_overrides
from tests.functional import api_server

CONF = pcisim_conf.CONF
PRODUCER, CONSUMER = otel_trace.SpanKind.PRODUCER, otel_trace.SpanKind.CONSUMER


class _Collector(http.server.BaseHTTPRequestHandler):
    """Takes OTLP/HTTP exports, as an OpenTelemetry collector does."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.exports.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def collector():
    """An OTLP/HTTP collector on a free loopback port; ``exports`` holds what it took."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.exports = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def spans(collector):
    """The spans this process ends from now on, from the tracer provider that
    telemetry's first start makes."""
    with _otel_configured(collector):
        telemetry.start(CONF, "pcisim-test")
    telemetry.stop(CONF)
    exporter = in_memory_span_exporter.InMemorySpanExporter()
    otel_trace.get_tracer_provider().add_span_processor(otel_export.SimpleSpanProcessor(exporter))
    yield exporter
    otel_trace.get_tracer_provider().force_flush()


@pytest.fixture
def exporting(spans, collector):
    """Telemetry on, as ``[otel] enabled`` turns it on; off again after the test."""
    spans.clear()
    with _otel_configured(collector):
        telemetry.start(CONF, "pcisim-test")
    yield spans
    telemetry.stop(CONF)


def _otel_configured(collector):
    host, port = collector.server_address
    return config_overrides.overridden(
        CONF, {("enabled", "otel"): True, ("otlp_endpoint", "otel"): f"http://{host}:{port}"}
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory) as running:
        yield running


@pytest.fixture
def boot(plane):
    """Boots a GPU server through the HTTP API (made now, so traced while exporting),
    and returns the request id of its POST once the compute has built it. The server
    is deleted after the test (the node has one GPU)."""
    booted = []

    def boot():
        client = plane.wsgi_app().test_client()
        response = client.post("/servers", json={"server": {"name": "vm", "pci_requests": "gpu:1"}})
        assert response.status_code == 202, response.json
        booted.append(response.json["server"]["id"])
        assert plane.wait_for(booted[-1]) == "active"
        return response.headers["X-OpenStack-Request-ID"]

    yield boot
    for server_id in booted:
        plane.delete(server_id)


def _boot_spans(exporter):
    """The spans of the trace the boot's HTTP request began, once the compute's
    handling of the build (the last to end) has ended."""
    wait_until(
        lambda: _named(exporter, "build_and_run_instance receive"),
        what="the compute's span of the build",
    )
    (request,) = _named(exporter, "HTTP POST /servers")
    trace_id = request.context.trace_id
    return [span for span in exporter.get_finished_spans() if span.context.trace_id == trace_id]


def _named(exporter, name):
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_a_boot_is_one_trace_from_the_api_through_the_conductor_to_the_compute(boot, exporting):
    request_id = boot()
    trace = _boot_spans(exporting)

    (root,) = [span for span in trace if span.parent is None]
    assert (root.name, root.kind) == ("HTTP POST /servers", otel_trace.SpanKind.SERVER)
    handled = {span.name for span in trace if span.kind == CONSUMER}
    assert handled == {
        "schedule_and_build_instances receive",  # the conductor
        "build_and_run_instance receive",  # the compute
        "object_action receive",  # the conductor, for the compute's object calls
    }
    # Nothing the request caused began a trace of its own.
    of_request = exporting.get_finished_spans()
    of_request = [s for s in of_request if s.attributes.get("openstack.request_id") == request_id]
    assert {span.context.trace_id for span in of_request} == {root.context.trace_id}


def test_the_object_calls_of_a_boot_carry_the_object_method_and_version(boot, exporting):
    boot()
    sent = [span for span in _boot_spans(exporting) if span.kind == PRODUCER]

    carried = {
        (
            span.attributes["rpc.method"],
            span.attributes["pcisim.object"],
            span.attributes["pcisim.object.method"],
            span.attributes["pcisim.object.version"],
        )
        for span in sent
        if "pcisim.object" in span.attributes
    }
    assert carried == {("object_action", "Instance", "save_with_devices", Instance.VERSION)}
    assert {span.name.partition(".")[2] for span in sent} >= {
        "schedule_and_build_instances",
        "build_and_run_instance",
    }


def test_the_spans_are_exported_over_otlp_to_the_configured_endpoint(boot, exporting, collector):
    boot()
    trace_id = _boot_spans(exporting)[0].context.trace_id.to_bytes(16, "big")

    otel_trace.get_tracer_provider().force_flush()

    exported = set()
    for path, body in collector.exports:
        assert path == "/v1/traces"
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            (service,) = [a for a in resource_spans.resource.attributes if a.key == "service.name"]
            exported |= {
                (service.value.string_value, span.trace_id)
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            }
    assert ("pcisim-test", trace_id) in exported


def test_with_telemetry_off_a_boot_makes_no_span(boot, spans):
    spans.clear()

    boot()
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: spans.get_finished_spans(), timeout=1.0)

    assert spans.get_finished_spans() == ()


def test_with_telemetry_off_a_conductor_or_compute_imports_nothing_of_opentelemetry(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        from pcisim import concurrency
        concurrency.select_backend()
        from pcisim import conf, telemetry
        from pcisim.cmd import compute, conductor
        conf.parse_args([], default_config_files=[])
        telemetry.start(conf.CONF, "pcisim-conductor")
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
