"""``traces check`` reads the run's history (sessions, server incarnations): what a killed
session or a dead process cut short is counted apart, and everything else is still checked.

Spans are planted through the real OTLP exporter into a real store; ``sessions.jsonl`` and
``servers.jsonl`` are written in the driver's format (their writers are tested with the
driver and supervisor).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from rollgym.cli import traces as traces_cli
from rollgym.telemetry import names
from synthetic_run import planting_spans

Plant = Callable[[trace.Tracer], None]
T0 = time.time() - 100.0  # session 0 starts here; session 1 at T0 + 50


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _planted(tmp_path: Path, plant: Plant) -> None:
    with planting_spans(tmp_path) as tracer:
        plant(tracer)


def _sessions(tmp_path: Path, *statuses: str) -> None:
    """Sessions 0, 1, ... 50 s apart; ``killed`` writes no end line."""
    lines = []
    for index, status in enumerate(statuses):
        at = T0 + 50 * index
        lines.append({"session": f"s{index}", "index": index, "event": "start", "at": at})
        if status != "killed":
            lines.append({"session": f"s{index}", "event": "end", "at": at + 40, "status": status})
    (tmp_path / "sessions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _dispatch(tracer: trace.Tracer, rollout_id: str, session: int, at: float) -> trace.Span:
    return tracer.start_span(
        names.SPAN_DISPATCH,
        context=trace.Context(),
        start_time=_ns(at),
        attributes={names.ROLLOUT_ID: rollout_id, names.RUN_SESSION: session},
    )


def _under(parent: trace.Span | SpanContext) -> trace.Context:
    context = parent if isinstance(parent, SpanContext) else parent.get_span_context()
    return trace.set_span_in_context(NonRecordingSpan(context))


def _ended(
    tracer: trace.Tracer,
    name: str,
    parent: trace.Span | SpanContext,
    start: float,
    end: float,
    attributes: dict[str, Any] | None = None,
) -> None:
    """A span ``name`` under ``parent``, from ``start`` to ``end`` (seconds since the epoch)."""
    tracer.start_span(
        name, context=_under(parent), start_time=_ns(start), attributes=attributes
    ).end(_ns(end))


def _lost_parent(of: trace.Span) -> SpanContext:
    """A parent in ``of``'s trace that no process exported."""
    trace_id = of.get_span_context().trace_id
    return SpanContext(trace_id, int.from_bytes(os.urandom(8)), True, TraceFlags(1))


def _check(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = traces_cli.main(["check", str(run_dir), "--json"])
    report = orjson.loads(capsys.readouterr().out)
    traces_cli.main(["check", str(run_dir)])
    return code, report, capsys.readouterr().out


def test_a_rollout_rerun_in_the_next_session_is_its_own_dispatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def plant(tracer: trace.Tracer) -> None:
        _dispatch(tracer, "3-0", 0, T0 + 1).end(_ns(T0 + 2))  # cancelled by Ctrl-C
        _dispatch(tracer, "3-0", 1, T0 + 51).end(_ns(T0 + 52))  # run again after resume

    _planted(tmp_path, plant)
    _sessions(tmp_path, "interrupted", "completed")
    code, report, text = _check(tmp_path, capsys)
    assert code == 0, report["violations"]
    assert report["history"]["sessions"] == [
        {"index": 0, "status": "interrupted"},
        {"index": 1, "status": "completed"},
    ]
    assert "sessions: 0 interrupted, 1 completed" in text


def test_two_dispatches_of_one_attempt_in_one_session_still_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def plant(tracer: trace.Tracer) -> None:
        _dispatch(tracer, "3-0", 1, T0 + 51).end(_ns(T0 + 52))
        _dispatch(tracer, "3-0", 1, T0 + 53).end(_ns(T0 + 54))

    _planted(tmp_path, plant)
    _sessions(tmp_path, "interrupted", "completed")
    code, report, _ = _check(tmp_path, capsys)
    assert code == 1
    assert report["violation_counts"] == {"one_dispatch_per_attempt": 1}


def test_a_killed_session_excuses_lost_spans_but_never_a_leak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def plant(tracer: trace.Tracer) -> None:
        # session 0 (killed): 1-0's dispatch was exported, its agent's spans were not
        home = _dispatch(tracer, "1-0", 0, T0 + 1)
        _ended(tracer, "POST /verify", _lost_parent(home), T0 + 2, T0 + 3)
        # 2-0's dispatch died queued in the driver: its model span and engine span are homeless
        homeless = SpanContext(int.from_bytes(os.urandom(16)), 7, True, TraceFlags(1))
        model = {names.ROLLOUT_ID: "2-0"}
        _ended(tracer, names.SPAN_MODEL_CHAT, homeless, T0 + 4, T0 + 5, model)
        engine = {names.GEN_AI_REQUEST_ID: "chatcmpl-2-0.0"}
        _ended(tracer, names.SPAN_ENGINE_REQUEST, homeless, T0 + 4, T0 + 5, engine)
        # a real leak in the killed session: a span of 1-0 inside 5-0's dispatch trace
        other = _dispatch(tracer, "5-0", 0, T0 + 6)
        _ended(tracer, names.SPAN_MODEL_CHAT, other, T0 + 7, T0 + 8, {names.ROLLOUT_ID: "1-0"})
        other.end(_ns(T0 + 9))
        home.end(_ns(T0 + 10))
        # session 1 (clean): an orphan with no dead process behind it
        clean = _dispatch(tracer, "7-0", 1, T0 + 51)
        _ended(tracer, "orphan", _lost_parent(clean), T0 + 52, T0 + 53)
        clean.end(_ns(T0 + 54))

    _planted(tmp_path, plant)
    _sessions(tmp_path, "killed", "completed")
    code, report, text = _check(tmp_path, capsys)
    assert code == 1
    # the leak fails although its session was killed; the clean session's orphan fails
    assert report["violation_counts"] == {"isolation": 1, "missing_parent": 1}
    leak = next(v for v in report["violations"] if v["rule"] == "isolation")
    assert leak["rollout_id"] == "1-0"
    # the lost spans are counted under the session that cut them, one per check they hit:
    # the verify span (parent), the homeless model span (isolation, parent) and the homeless
    # engine span (engine isolation, parent)
    assert report["cut_short"] == {"session 0 (killed)": 5}
    assert "sessions: 0 killed, 1 completed" in text
    assert "cut short" in text and "session 0 (killed): 5" in text


def _incarnations(tmp_path: Path, port: int, died_at: float) -> None:
    lines = [
        {"event": "start", "instance": "solver@1", "pid": 4242, "host": "127.0.0.1",
         "port": port, "at": T0, "session": 0},
        {"event": "died", "instance": "solver@1", "pid": 4242, "at": died_at,
         "exit": "killed by SIGKILL", "session": 0},
        {"event": "start", "instance": "solver@1", "pid": 4343, "host": "127.0.0.1",
         "port": port, "at": died_at + 2, "session": 0},
    ]  # fmt: skip
    (tmp_path / "servers.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_dead_process_excuses_only_the_traces_that_reached_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = 41234

    def client(tracer: trace.Tracer, parent: trace.Span, to_port: int, at: float) -> None:
        tracer.start_span(
            "POST",
            context=_under(parent),
            kind=SpanKind.CLIENT,
            start_time=_ns(at),
            attributes={names.SERVER_ADDRESS_HTTP: "127.0.0.1", names.SERVER_PORT: to_port},
        ).end(_ns(at + 1))

    def orphan(tracer: trace.Tracer, of: trace.Span, at: float) -> None:
        _ended(tracer, "POST /v1/chat/completions", _lost_parent(of), at, at + 0.5)

    def plant(tracer: trace.Tracer) -> None:
        reached = _dispatch(tracer, "1-0", 0, T0 + 1)
        client(tracer, reached, port, T0 + 1)  # the dead replica served it
        orphan(tracer, reached, T0 + 1.2)
        reached.end(_ns(T0 + 3))
        elsewhere = _dispatch(tracer, "2-0", 0, T0 + 1)
        client(tracer, elsewhere, port + 1, T0 + 1)  # the other replica: nothing died there
        orphan(tracer, elsewhere, T0 + 1.2)
        elsewhere.end(_ns(T0 + 3))
        later = _dispatch(tracer, "3-0", 0, T0 + 20)
        client(tracer, later, port, T0 + 20)  # the restarted process, alive
        orphan(tracer, later, T0 + 20.2)
        later.end(_ns(T0 + 22))

    _planted(tmp_path, plant)
    _sessions(tmp_path, "completed")
    _incarnations(tmp_path, port, died_at=T0 + 10)
    code, report, text = _check(tmp_path, capsys)
    assert code == 1
    assert report["violation_counts"] == {"missing_parent": 2}
    label = "solver@1 pid 4242 (killed by SIGKILL) in session 0"
    assert report["cut_short"] == {label: 1}
    assert report["history"]["server_deaths"] == [
        {"process": "solver@1 pid 4242", "exit": "killed by SIGKILL", "session": 0}
    ]
    assert f"server processes that died mid-run: {label}" in text
