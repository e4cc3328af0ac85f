"""Resolution of config + OTEL_* (the environment wins), and the hand-off to launched servers."""

from __future__ import annotations

import json

import pytest

from rollgym.config import TelemetryConfig
from rollgym.telemetry.groups import PRESETS, SpanGroup
from rollgym.telemetry.settings import TelemetrySettings, server_env

STORE = "http://127.0.0.1:4999"


def resolve(environ: dict[str, str] | None = None, **config: object) -> TelemetrySettings:
    return TelemetrySettings.from_config(
        TelemetryConfig(**config), local_store_endpoint=STORE, run_id="r1", environ=environ or {}
    )


def test_auto_with_nothing_set_goes_to_the_local_store_traces_only():
    s = resolve()
    assert s.traces_exporter == "otlp" and s.to_local_store and s.endpoint == STORE
    assert s.protocol == "http/protobuf"
    assert s.metrics_exporter == "none"  # the store takes traces only
    assert s.groups == PRESETS["default"]
    assert TelemetrySettings.needs_local_store(TelemetryConfig(), environ={})


def test_auto_without_a_store_exports_nothing():
    s = TelemetrySettings.from_config(TelemetryConfig(), environ={})
    assert s.traces_exporter == "none" and not s.tracing


def test_otel_env_wins_over_config():
    environ = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.5",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
    }
    s = resolve(
        environ,
        exporter="otlp",
        endpoint="http://cfg:1",
        sampler="always_off",
        protocol="http/protobuf",
    )
    assert s.traces_exporter == "console"
    assert s.metrics_exporter == "none"
    assert s.protocol == "grpc"
    assert (s.sampler, s.sampler_arg) == ("traceidratio", "0.5")
    assert not TelemetrySettings.needs_local_store(TelemetryConfig(), environ=environ)


def test_env_endpoint_beats_config_endpoint_and_local_store():
    s = resolve({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, endpoint="http://cfg:1")
    assert s.endpoint == "http://collector:4318" and not s.to_local_store
    assert s.metrics_exporter == "otlp"  # an explicit destination gets metrics too
    assert resolve(endpoint="http://cfg:1").endpoint == "http://cfg:1"


@pytest.mark.parametrize(
    "given",
    [
        "http://phoenix:6006/v1/traces",
        "http://phoenix:6006/v1/traces/",
        "http://phoenix:6006/v1/metrics",
        "http://phoenix:6006",
    ],
)
def test_a_full_trace_url_is_taken_as_its_base_so_no_path_is_doubled(given, monkeypatch):
    from rollgym.telemetry.exporters import otlp_http_traces_target

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for settings in (resolve(endpoint=given), resolve({"OTEL_EXPORTER_OTLP_ENDPOINT": given})):
        assert settings.endpoint == "http://phoenix:6006"
        assert otlp_http_traces_target(settings)[0] == "http://phoenix:6006/v1/traces"


def test_a_grpc_endpoint_and_a_per_signal_url_are_used_as_given(monkeypatch):
    from rollgym.telemetry.exporters import otlp_http_traces_target

    grpc = resolve(endpoint="http://collector:4317/v1/traces", protocol="grpc")
    assert grpc.endpoint == "http://collector:4317/v1/traces"  # gRPC has no paths to add
    full = "http://collector:4318/custom/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", full)
    signal = resolve({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": full})
    assert otlp_http_traces_target(signal)[0] == full


def test_sdk_disabled_turns_everything_off():
    s = resolve({"OTEL_SDK_DISABLED": "true"}, exporter="otlp", endpoint="http://cfg:1")
    assert s.traces_exporter == "none" and s.metrics_exporter == "none"
    assert not TelemetrySettings.needs_local_store(
        TelemetryConfig(), environ={"OTEL_SDK_DISABLED": "true"}
    )


def test_unsupported_env_exporter_means_none_and_lists_use_the_first():
    assert resolve({"OTEL_TRACES_EXPORTER": "zipkin"}).traces_exporter == "none"
    assert resolve({"OTEL_TRACES_EXPORTER": "console,otlp"}).traces_exporter == "console"


def test_config_metrics_false_and_presets():
    s = resolve(exporter="otlp", endpoint="http://c:1", metrics=False, preset="minimal")
    assert s.metrics_exporter == "none"
    assert s.groups == {SpanGroup.ROLLOUT, SpanGroup.HTTP}
    assert resolve(preset=["model", "env"]).groups == {SpanGroup.MODEL, SpanGroup.ENV}


def test_server_env_round_trip_and_no_secrets(monkeypatch):
    monkeypatch.setenv("MY_OTLP_HEADERS", "x-api-key=s3cr3t")
    s = resolve(
        {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
        single_trace=True,
        max_queue_size=128,
        preset="per_rollout",
        headers_env="MY_OTLP_HEADERS",
    )
    out = server_env(s)
    assert "s3cr3t" not in json.dumps(out)
    assert out["OTEL_TRACES_EXPORTER"] == "otlp"
    assert out["OTEL_EXPORTER_OTLP_ENDPOINT"] == STORE
    assert out["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert out["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert out["OTEL_TRACES_SAMPLER_ARG"] == "0.1"
    back = TelemetrySettings.from_env(out)
    assert back == s
    assert back.single_trace and back.run_id == "r1" and back.max_queue_size == 128
    assert back.groups == PRESETS["per_rollout"]


def test_from_env_without_rollgym_json_reads_plain_otel():
    s = TelemetrySettings.from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert s.traces_exporter == "console" and s.groups == PRESETS["default"]
    assert TelemetrySettings.from_env({}).traces_exporter == "none"
    assert TelemetrySettings.from_env({"_ROLLGYM_TELEMETRY": "{not json"}).traces_exporter == "none"


def test_server_env_when_off():
    out = server_env(TelemetrySettings())
    assert out["OTEL_TRACES_EXPORTER"] == "none"
    assert TelemetrySettings.from_env(out) == TelemetrySettings()


@pytest.mark.parametrize("bad", ['{"traces_exporter": "zipkin"}', "[]", '{"groups": ["nope"]}'])
def test_from_json_rejects_bad_payloads(bad):
    with pytest.raises((ValueError, TypeError)):
        TelemetrySettings.from_json(bad)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [(None, 10.0), ("10000", 10.0), ("2500", 2.5), ("500", 0.5), (" 30000 ", 30.0)],
)
def test_otlp_timeout_is_read_in_milliseconds_as_the_spec_says(raw, seconds):
    """The specification gives ``OTEL_EXPORTER_OTLP_TIMEOUT`` in milliseconds (10000 = 10 s)."""
    environ = {} if raw is None else {"OTEL_EXPORTER_OTLP_TIMEOUT": raw}
    assert resolve(environ).export_timeout_s == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["ten", "0", "-5", "nan", "inf"])
def test_a_bad_otlp_timeout_keeps_the_default_with_one_warning(raw, caplog):
    with caplog.at_level("WARNING", logger="rollgym"):
        s = resolve({"OTEL_EXPORTER_OTLP_TIMEOUT": raw})
    assert s.export_timeout_s == 10.0
    lines = [
        r.getMessage() for r in caplog.records if "OTEL_EXPORTER_OTLP_TIMEOUT" in r.getMessage()
    ]
    assert len(lines) == 1 and "milliseconds" in lines[0]
