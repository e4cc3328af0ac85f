"""``rollgym traces check``: passes on a clean run, fails (listing why) on planted violations."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from rollgym.cli import traces as traces_cli
from rollgym.telemetry import names
from rollgym.tracestore.store_process import start_trace_store
from synthetic_run import emit_run, planting_spans, write_outputs


def _check(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = traces_cli.main(["check", str(run_dir), "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_clean_run_passes(finished_run, capsys) -> None:
    run_dir, run = finished_run
    code, report = _check(run_dir, capsys)
    assert code == 0, report["violations"]
    assert report["largest_trace"]["spans"] == 11
    assert report["stats"]["rollouts.jsonl_checked"] == len(run.rollouts)
    assert traces_cli.main(["check", str(run_dir)]) == 0
    assert "largest trace: 11 spans" in capsys.readouterr().out


def test_per_rollout_preset_expects_no_links(tmp_path: Path, capsys) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        run = emit_run(
            lambda: OTLPSpanExporter(endpoint=store.traces_endpoint), rollouts=5, with_job=False
        )
    finally:
        store.stop()
    write_outputs(tmp_path, run)
    code, report = _check(tmp_path, capsys)
    assert code == 0, report["violations"]
    assert report["stats"]["job_traces"] == 0


def _context(trace_hex: str, span_hex: str) -> trace.Context:
    parent = SpanContext(
        int(trace_hex, 16), int(span_hex, 16), is_remote=True, trace_flags=TraceFlags(1)
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def test_planted_violations_are_listed(finished_run, tmp_path: Path, capsys) -> None:
    source, run = finished_run
    for name in ("traces.db", "rollouts.jsonl", "failures.jsonl"):
        shutil.copy(source / name, tmp_path / name)
    with open(tmp_path / "rollouts.jsonl", "a") as out:
        out.write(json.dumps({"rollout_id": "ghost", "trace_id": "ab" * 16}) + "\n")
    victim = run.rollouts[1]  # its trace receives a span of another rollout
    with planting_spans(tmp_path) as tracer:
        some_span = os.urandom(8).hex()
        tracer.start_span(
            names.SPAN_MODEL_CHAT,
            context=_context(victim["trace_id"], some_span),
            attributes={names.ROLLOUT_ID: run.rollouts[0]["rollout_id"]},
        ).end()  # foreign span (and its parent does not exist either)
        tracer.start_span("orphan", context=_context(victim["trace_id"], os.urandom(8).hex())).end()
        job = _context(run.job_trace_id, "00" * 7 + "01")
        job_context = trace.get_current_span(job).get_span_context()
        tracer.start_span(
            names.SPAN_DISPATCH,
            context=trace.Context(),
            links=[Link(job_context), Link(job_context)],
            attributes={names.ROLLOUT_ID: "planted-0"},
        ).end()
    code, report = _check(tmp_path, capsys)
    assert code == 1
    counts = report["violation_counts"]
    assert counts["isolation"] == 1
    assert counts["missing_parent"] == 2
    assert counts["dispatch_job_link"] == 1
    assert counts["rollout_has_trace"] == 1
    isolation = next(v for v in report["violations"] if v["rule"] == "isolation")
    assert isolation["trace_id"] == victim["trace_id"]
    assert traces_cli.main(["check", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "VIOLATION isolation" in text and "FAILED" in text


def _dispatches_linking_to(store_endpoint: str, targets: list[SpanContext]) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=store_endpoint)))
    tracer = provider.get_tracer("sampled")
    for index, target in enumerate(targets):
        tracer.start_span(
            names.SPAN_DISPATCH,
            context=trace.Context(),
            links=[Link(target)],
            attributes={names.ROLLOUT_ID: f"{index}-0"},
        ).end()
    provider.shutdown()


def test_an_unsampled_job_span_is_not_a_violation(tmp_path: Path, capsys) -> None:
    """Sampling decides per trace: the job span may be dropped while its rollouts are kept.

    Their links then name a span absent from the store; that is correct as long as each
    dispatch has one link and all name the same span. Rollouts the sampler dropped are
    marked ``trace_sampled: false`` and not looked for.
    """
    job = SpanContext(int("ab" * 16, 16), int("cd" * 8, 16), is_remote=False)
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        _dispatches_linking_to(store.traces_endpoint, [job, job, job])
    finally:
        store.stop()
    (tmp_path / "rollouts.jsonl").write_text(
        json.dumps({"rollout_id": "9-0", "trace_id": "ef" * 16, "trace_sampled": False}) + "\n"
    )
    code, report = _check(tmp_path, capsys)
    assert code == 0, report["violations"]
    assert report["stats"]["rollouts.jsonl_unsampled"] == 1


def test_dispatches_linking_to_different_spans_are_a_violation(tmp_path: Path, capsys) -> None:
    first = SpanContext(int("ab" * 16, 16), int("cd" * 8, 16), is_remote=False)
    second = SpanContext(int("ab" * 16, 16), int("ce" * 8, 16), is_remote=False)
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        _dispatches_linking_to(store.traces_endpoint, [first, second])
    finally:
        store.stop()
    code, report = _check(tmp_path, capsys)
    assert code == 1
    assert report["violation_counts"]["dispatch_job_link"] == 1
