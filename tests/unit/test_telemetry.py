"""Turning OpenTelemetry export on and off (``pcisim.telemetry``); the spans of a boot
are in tests/functional/test_telemetry.py."""

import sys

import pytest

from pcisim import conf as pcisim_conf
from pcisim import exception, telemetry
from tests import config_overrides

CONF = pcisim_conf.CONF


def test_with_otel_off_start_leaves_the_libraries_tracing_off():
    telemetry.start(CONF, "pcisim-test")

    assert not telemetry.exporting()
    assert CONF.oslo_messaging_tracing.tracing_enabled is False


def test_with_otel_off_a_wsgi_app_is_served_as_it_is():
    def app(environ, start_response):
        return []

    assert telemetry.traced(app, CONF) is app


def test_otel_enabled_without_opentelemetry_names_the_option_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)

    with config_overrides.overridden(CONF, {("enabled", "otel"): True}):
        with pytest.raises(exception.InvalidConfigValue) as raised:
            telemetry.start(CONF, "pcisim-test")

    assert str(raised.value).startswith("invalid [otel] enabled: OpenTelemetry is not installed")
    assert "pip install 'pcisim[otel]'" in str(raised.value)
    assert CONF.oslo_messaging_tracing.tracing_enabled is False
