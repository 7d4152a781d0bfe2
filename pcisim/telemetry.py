"""OpenTelemetry traces exported over OTLP: optional (the ``otel`` extra), off by default.

pcisim makes no span of its own; its libraries do. oslo.middleware's tracing middleware
makes a span of each HTTP request the API serves, and oslo.messaging's tracing one of
each RPC message sent (``PRODUCER``) and one of each handled (``CONSUMER``), carrying
the trace's context in the message's context, so that a boot is one trace from the
API through the conductor to the compute. pcisim adds what its own JSONL trace
(``pcisim.trace``) records of an object call to the span of the message that carries
it: the object (``pcisim.object``), its remotable method (``pcisim.object.method``)
and the version the sender holds (``pcisim.object.version``).

``[otel] enabled`` turns it on, for every service the process runs: ``start`` sets the
libraries' own switches (``[oslo_middleware_tracing]``, ``[oslo_messaging_tracing]``)
and has oslo.middleware's ``init_tracing`` make the process's tracer provider, which
exports to ``[otel] otlp_endpoint`` and which oslo.messaging finds and uses. Their other
options (``[oslo_middleware_tracing] sampling_rate``, say) apply as documented there.
Off, nothing here imports OpenTelemetry and every message costs one check more.
"""

import contextlib

from pcisim import exception

# What oslo.messaging names the tracer of its spans.
MESSAGING_SCOPE = "oslo.messaging"
_CARRIED_KEY = "pcisim.carried_object"
_exporting = False
# The tracer provider is made, with the span processor that labels object calls.
_provider_made = False
# The libraries' options that start sets (to True, the endpoint, the service name).
_SWITCHES = (
    ("enabled", "oslo_middleware_tracing"),
    ("otlp_endpoint", "oslo_middleware_tracing"),
    ("service_name", "oslo_middleware_tracing"),
    ("tracing_enabled", "oslo_messaging_tracing"),
    ("tracing_service_name", "oslo_messaging_tracing"),
)


def start(conf, service_name):
    """Export this process's traces when ``[otel] enabled``, under ``service_name``.

    Raises ``InvalidConfigValue`` naming ``[otel] enabled`` when OpenTelemetry is not
    installed. OpenTelemetry sets a process's tracer provider once: a start after a
    ``stop`` only turns the libraries' spans on again.
    """
    global _exporting, _provider_made
    if not conf.otel.enabled:
        return
    tracing = _tracing_middleware()
    _switch_libraries_on(conf, service_name)
    if not _provider_made:
        tracing.init_tracing(conf)
        _label_object_calls()
        _provider_made = True
    _exporting = True


def stop(conf):
    """Make no more spans: the libraries' switches go back to their configured values.
    The tracer provider stays (its spans are flushed as it exits)."""
    global _exporting
    for name, group in _SWITCHES:
        conf.clear_override(name, group=group)
    _exporting = False


def exporting():
    """Whether this process makes spans (``start`` ran with ``[otel] enabled``)."""
    return _exporting


def traced(wsgi_app, conf):
    """``wsgi_app`` behind oslo.middleware's tracing middleware while exporting;
    ``wsgi_app`` itself otherwise, unchanged."""
    if not _exporting:
        return wsgi_app
    from oslo_middleware import tracing

    return tracing.TracingMiddleware(wsgi_app, conf)


@contextlib.contextmanager
def carrying(carried):
    """While the block sends one message, the span oslo.messaging makes of it takes
    ``carried`` (``trace.carried_object``'s fields) as ``pcisim.*`` attributes."""
    from opentelemetry import context as otel_context

    attributes = {
        f"pcisim.{name.replace('_', '.')}": value
        for name, value in carried.items()
        if value is not None
    }
    token = otel_context.attach(otel_context.set_value(_CARRIED_KEY, attributes))
    try:
        yield
    finally:
        otel_context.detach(token)


def _tracing_middleware():
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
        from oslo_middleware import tracing
    except ImportError as error:
        reason = f"OpenTelemetry is not installed ({error}); pip install 'pcisim[otel]'"
        raise exception.InvalidConfigValue(option="[otel] enabled", reason=reason) from None
    return tracing


def _switch_libraries_on(conf, service_name):
    from oslo_middleware import opts as middleware_opts

    # NOTE: oslo.middleware registers its options only once the middleware is made.
    for group, opts in middleware_opts.list_opts_tracing():
        conf.register_opts(opts, group)
    values = (True, conf.otel.otlp_endpoint, service_name, True, service_name)
    for (name, group), value in zip(_SWITCHES, values, strict=True):
        conf.set_override(name, value, group=group)


def _label_object_calls():
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk import trace as otel_sdk_trace

    class ObjectCallLabels(otel_sdk_trace.SpanProcessor):
        """Sets the object a message carries (see ``carrying``) on the span that
        oslo.messaging starts for sending it."""

        def on_start(self, span, parent_context=None):
            carried = otel_context.get_value(_CARRIED_KEY, parent_context)
            if carried and span.instrumentation_scope.name == MESSAGING_SCOPE:
                span.set_attributes(carried)

    otel_trace.get_tracer_provider().add_span_processor(ObjectCallLabels())
