"""Engine spans reach the run's store behind its token, and ``traces check`` attributes them.

A real vLLM exports its ``llm_request`` spans (kind SERVER, scope ``vllm.llm_engine``, the
attribute names of vLLM's ``vllm/tracing.py``) over OTLP to ``--otlp-traces-endpoint``; they
carry no ``gym.rollout.id``, only ``gen_ai.request.id`` (``chatcmpl-<X-Request-Id>``). Here
spans of exactly that shape are posted over OTLP/HTTP to a run's store, the way vLLM's own
SDK exporter sends them, and ``rollgym traces check`` must report the one in a foreign
rollout's trace and the one naming a rollout that has no trace, and accept the rest.

The same module checks the run-wide plumbing of the store's bearer token (every launched
server sends it; the store refuses a request without it) and that a backend which is merely
slow to start loses no span.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import traces_check, wait_for
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from telemetry_helpers import (
    SpanRecord,
    Spans,
    TracedJob,
    closed_port,
    quick_rows,
    quickstart_job,
    read_store,
)

from rollgym.telemetry import names
from rollgym.tracestore.store_process import start_trace_store

pytestmark = pytest.mark.e2e

TOKEN = "e2e-token-7f3a"  # a test's own secret, never a real one
#: The attribute names vLLM's ``SpanAttributes`` gives an ``llm_request`` span.
VLLM_REQUEST_ID = "gen_ai.request.id"
VLLM_ATTRIBUTES: dict[str, Any] = {
    "gen_ai.usage.prompt_tokens": 31,
    "gen_ai.usage.completion_tokens": 7,
    "gen_ai.latency.time_to_first_token": 0.012,
    "gen_ai.latency.e2e": 0.05,
    "gen_ai.latency.time_in_queue": 0.001,
    "gen_ai.latency.time_in_model_prefill": 0.01,
    "gen_ai.latency.time_in_model_decode": 0.03,
    "gen_ai.latency.time_in_model_inference": 0.04,
    "gen_ai.request.max_tokens": 256,
    "gen_ai.request.top_p": 0.95,
    "gen_ai.request.temperature": 0.7,
    "gen_ai.request.n": 1,
}


def _traced_job(root: Path, **telemetry: Any) -> TracedJob:
    return quickstart_job(root, quick_rows(3, 2, 1), telemetry=telemetry)


def _check(job: TracedJob) -> dict[str, Any]:
    proc = traces_check(job.out, "--json", env=job.env())
    report: dict[str, Any] = orjson.loads(proc.stdout)
    assert (proc.returncode == 0) == report["ok"], proc.stderr[-2000:]
    return report


def _post_unauthenticated(endpoint: str) -> int:
    request = urllib.request.Request(
        endpoint + "/v1/traces",
        data=b"",
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _vllm_span(
    provider: TracerProvider, request_id: str, parent: SpanRecord | None, arrival_ns: int
) -> None:
    """One ``llm_request`` exactly as vLLM's output processor opens it, ended at once."""
    tracer = provider.get_tracer("vllm.llm_engine")
    if parent is None:
        context = None  # a request that came without traceparent
    else:
        context = extract({"traceparent": f"00-{parent.trace_id}-{parent.span_id}-01"})
    span = tracer.start_span(
        "llm_request",
        kind=SpanKind.SERVER,
        context=context,
        start_time=arrival_ns,
        attributes={**VLLM_ATTRIBUTES, VLLM_REQUEST_ID: request_id},
    )
    span.end()


def test_engine_spans_are_attributed_by_their_request_id(tmp_path: Path) -> None:
    job = _traced_job(tmp_path)
    proc = job.run(env={"ROLLGYM_TRACE_STORE_TOKEN": TOKEN})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # every process of the run sent the token: nothing was refused, nothing lost
    telemetry = job.summary["telemetry"]
    assert telemetry["spans_dropped"] == 0 and telemetry["spans_exported"] > 0, telemetry
    assert "OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20$" in proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout, "a token the user set is never echoed"
    assert _check(job)["ok"]

    index = job.spans()
    simulated = {
        s.rollout_id: s
        for s in index.named(names.SPAN_ENGINE_REQUEST)
        if s.attributes[VLLM_REQUEST_ID].endswith(".0")
    }
    home, other = sorted(simulated)[:2]
    # where a real engine's span would hang: under the model server's span of that call
    home_parent = index.parent(simulated[home])
    other_parent = index.parent(simulated[other])
    assert home_parent is not None and other_parent is not None

    store = start_trace_store(job.db, job.out / "logs" / "tracestore-2.log", token=TOKEN)
    try:
        assert _post_unauthenticated(store.endpoint) == 401
        exporter = OTLPSpanExporter(
            endpoint=store.traces_endpoint, headers={"authorization": f"Bearer {TOKEN}"}
        )
        provider = TracerProvider()  # vLLM's own: default resource, no rollgym attribute
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        now = time.time_ns()
        _vllm_span(provider, f"chatcmpl-{home}.1", home_parent, now)  # its own rollout: fine
        _vllm_span(provider, f"0_chatcmpl-{home}.2-1a2b3c4d", home_parent, now)  # suffixes
        _vllm_span(provider, f"chatcmpl-{home}.3", other_parent, now)  # leaked into another
        _vllm_span(provider, "chatcmpl-no-such-rollout.0", None, now)  # names no traced rollout
        _vllm_span(provider, "chatcmpl-7d2f0c5e9b8a4c1d", None, now)  # not rollgym's: ignored
        provider.shutdown()
    finally:
        store.stop()

    report = _check(job)
    assert report["violation_counts"] == {"engine_isolation": 2}, report
    flagged = {(v["rollout_id"], v["trace_id"]) for v in report["violations"]}
    assert flagged == {
        (home, other_parent.trace_id),
        ("no-such-rollout", _trace_of_request(job, "chatcmpl-no-such-rollout.0")),
    }
    assert report["stats"]["engine_spans_unattributed"] >= 1


def _trace_of_request(job: TracedJob, request_id: str) -> str:
    """The trace of the one stored span whose ``gen_ai.request.id`` is ``request_id``."""
    (span,) = [s for s in read_store(job.db) if s.attributes.get(VLLM_REQUEST_ID) == request_id]
    return span.trace_id


def test_a_backend_slow_to_start_loses_no_span(tmp_path: Path) -> None:
    """The OTLP endpoint answers only after every rollout finished; the flush waits for it."""
    port = closed_port()
    job = _traced_job(tmp_path / "run")
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
    }
    proc = subprocess.Popen(
        [*job.command(), "--no-table"],
        env=job.env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=job.root,
    )
    try:
        assert wait_for(lambda: job.line_count("rollouts.jsonl") == 6, timeout=120)
        backend = start_trace_store(tmp_path / "backend.db", tmp_path / "backend.log", port=port)
        try:
            stdout, stderr = proc.communicate(timeout=240)
        finally:
            backend.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    telemetry = job.summary["telemetry"]
    assert telemetry["spans_dropped"] == 0, (telemetry, stderr[-2000:])
    stored = read_store(tmp_path / "backend.db")
    assert len(stored) == telemetry["spans_exported"] > 0
    assert Spans(stored).missing_parents() == []
