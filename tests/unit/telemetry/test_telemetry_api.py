"""The API other modules call stays as documented; the gate module stays import-light."""

from __future__ import annotations

import inspect
import subprocess
import sys

from rollgym.telemetry import context, metrics, setup, spans

SPAN_HELPERS = {
    "startup_span": [],
    "server_startup_span": ["name", "kind", "address"],
    "job_span": ["run_id"],
    "dispatch_span": ["collector_row", "dispatch_name", "destination"],
    "rollout_span": ["rollout_id", "agent_name"],
    "model_chat_span": ["rollout_id", "model", "provider"],
    "engine_request_span": ["request_id", "model", "rollout_id"],
    "env_seed_span": ["rollout_id"],
    "env_tool_span": ["rollout_id", "tool_name", "call_id"],
    "verify_span": ["rollout_id"],
    "http_client_span": ["method", "destination", "url", "route"],
    "http_server_span": ["method", "path", "headers", "scheme"],
    "genai_span": ["rollout_id", "model", "provider", "upstream", "operation"],
    "aggregate_metrics_span": ["server_name"],
    "finalize_span": [],
    "record_dispatch_outcome": ["span", "outcome", "reward"],
    "record_model_response": ["span", "response_json"],
    "record_evaluation": ["span", "reward"],
}


def test_span_helper_signatures():
    for name, params in SPAN_HELPERS.items():
        assert list(inspect.signature(getattr(spans, name)).parameters) == params, name


def test_setup_and_metrics_surface():
    assert set(setup.__all__) == {
        "TelemetryHandle",
        "TelemetrySettings",
        "install_for_tests",
        "is_trace_exporter_active",
        "server_env",
        "setup_telemetry",
    }
    params = inspect.signature(setup.setup_telemetry).parameters
    for p in ("settings", "service_name", "run_id", "server_name", "server_kind"):
        assert p in params
    assert callable(context.extract_context)
    for method in ("started", "finished"):
        assert callable(getattr(metrics.RolloutMetrics, method))
    for method in ("request_started", "request_finished", "trace_config"):
        assert callable(getattr(metrics.HttpClientMetrics, method))


def test_the_gate_module_imports_no_sdk():
    code = (
        "import sys, rollgym.telemetry.groups, rollgym.telemetry.names;"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
