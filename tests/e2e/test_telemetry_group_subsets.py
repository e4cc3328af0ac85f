"""The trace shape never depends on the span groups: every subset of them, with real servers.

TELEMETRY.md: "the preset chooses which spans exist, never the trace shape". For each of the
2^7 subsets of the groups this runs a small job and checks, on what reached the trace store:

- the job trace holds only job-level spans (``gym.job``, ``gym.job.*``); no span of a rollout is
  parented on the job, whatever is switched off;
- no trace holds spans of two attempts, and where a cross-process spine exists (``rollout`` or
  ``http``) every span of one attempt sits in one trace, the one its outcome names;
- with ``rollout`` on, each dispatch is a root, linked to the job exactly when ``job`` is on;
  with it off and ``http`` on, the driver's ``POST /run`` span is the fresh root instead;
- ``rollgym traces check``'s rules pass on the attempt's traces.

Affordable on a busy machine: the servers' groups are the five the servers read (``rollout``,
``http``, ``model``, ``env``, ``verify``); one parametrized case launches them once per subset
of those five, and runs the in-process driver four times against them, once per subset of the
two driver-only groups (``job``, ``startup``), each time with its own run id and its own
rollout ids, three rows each (two for a tool-loop agent, whose model and tool calls cross
processes, and one environment episode, where the environment performs the rollout); three
servers (model, environment, agent) keep each launch short.
The driver's spans go to the same store over OTLP, so each run is checked whole.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from telemetry_helpers import (
    SpanRecord,
    Spans,
    launched_servers,
    quick_rows,
    quick_servers,
    read_store,
    trace_store,
)

from rollgym import Collector, RolloutResult
from rollgym.reading.check import check_run
from rollgym.telemetry import names, spans
from rollgym.telemetry.groups import SpanGroup, configure_gate, gate
from rollgym.telemetry.setup import install_for_tests
from rollgym.tracestore.store import SCHEMA

pytestmark = pytest.mark.e2e

SERVER_GROUPS = (
    SpanGroup.ROLLOUT,
    SpanGroup.HTTP,
    SpanGroup.MODEL,
    SpanGroup.ENV,
    SpanGroup.VERIFY,
)
DRIVER_ONLY = (SpanGroup.JOB, SpanGroup.STARTUP)
AGENTS = ("walker",)
SERVERS = ("policy", "keys", "walker")
ROUTES = {"keychain_episodes": "keys"}
JOB_LEVEL = {names.SPAN_JOB, names.SPAN_AGGREGATE_METRICS, names.SPAN_FINALIZE}


def _subsets(groups: tuple[SpanGroup, ...]) -> list[frozenset[SpanGroup]]:
    return [
        frozenset(combo)
        for size in range(len(groups) + 1)
        for combo in itertools.combinations(groups, size)
    ]


def _label(groups: frozenset[SpanGroup]) -> str:
    return "+".join(sorted(g.value for g in groups)) or "none"


def _rows(prefix: str) -> list[dict[str, Any]]:
    """One row of each kind, with explicit rollout ids that name the driver run they belong to."""
    return [{**row, "rollout_id": f"{prefix}-{i}"} for i, row in enumerate(quick_rows(0, 2, 1))]


async def _drive(
    urls: dict[str, str], groups: frozenset[SpanGroup], run_id: str, traces_to: str
) -> list[RolloutResult]:
    """The in-process driver with ``groups``, spans to the store; ``gym.job`` as ``run_job`` opens it."""
    install_for_tests(
        OTLPSpanExporter(endpoint=f"{traces_to}/v1/traces", timeout=30), groups, run_id=run_id
    )
    try:
        async with Collector(
            {name: urls[name] for name in (*AGENTS, "keys")},
            agent="walker",
            environment_routes=ROUTES,
            agents=AGENTS,
            concurrency=3,
            timeout_s=60,
        ) as collector:
            rows = _rows(run_id)
            if gate.job:
                with spans.job_span(run_id):
                    outcomes = [o async for o in collector.stream(rows)]
            else:
                outcomes = [o async for o in collector.stream(rows)]
    finally:
        configure_gate((), tracing_active=False)
    assert len(outcomes) == 3 and all(isinstance(o, RolloutResult) for o in outcomes), outcomes
    return [o for o in outcomes if isinstance(o, RolloutResult)]


def _rollout_of(span: SpanRecord) -> str | None:
    from rollgym.reading.engine_ids import rollout_of_engine_id

    if span.rollout_id is not None:
        return span.rollout_id
    engine_id = span.attributes.get(names.GEN_AI_REQUEST_ID)
    return rollout_of_engine_id(engine_id) if isinstance(engine_id, str) else None


def _traces_of_run(index: Spans, run_id: str) -> set[str]:
    """Traces holding the driver's spans of ``run_id`` or any span of its rollouts."""
    return {
        span.trace_id
        for span in index.all
        if span.resource.get(names.RUN_ID) == run_id
        or (_rollout_of(span) or "").startswith(f"{run_id}-")
    }


def _check_shape(
    index: Spans, groups: frozenset[SpanGroup], run_id: str, outcomes: list[RolloutResult]
) -> None:
    traces = _traces_of_run(index, run_id)
    mine = [s for s in index.all if s.trace_id in traces]
    label = _label(groups)

    jobs = [s for s in mine if s.name == names.SPAN_JOB]
    assert len(jobs) == (1 if SpanGroup.JOB in groups else 0), label
    for job in jobs:
        assert job.parent_id is None, label
        in_job_trace = {s.name for s in mine if s.trace_id == job.trace_id}
        assert in_job_trace <= JOB_LEVEL, (label, in_job_trace - JOB_LEVEL)
        parented_on_job = [s.name for s in mine if s.parent_id == job.span_id]
        assert set(parented_on_job) <= JOB_LEVEL, (label, parented_on_job)

    by_trace: dict[str, set[str]] = {}
    by_rollout: dict[str, set[str]] = {}
    for span in mine:
        rollout_id = _rollout_of(span)
        if rollout_id is not None:
            by_trace.setdefault(span.trace_id, set()).add(rollout_id)
            by_rollout.setdefault(rollout_id, set()).add(span.trace_id)
    shared = {trace: ids for trace, ids in by_trace.items() if len(ids) > 1}
    assert not shared, (label, shared)

    spine = SpanGroup.ROLLOUT in groups or SpanGroup.HTTP in groups
    for outcome in outcomes:
        held = by_rollout.get(outcome.rollout_id, set())
        if spine:
            assert outcome.trace_id is not None, label
            assert held <= {outcome.trace_id}, (label, outcome.rollout_id, held)
        else:
            assert outcome.trace_id is None, label

    dispatches = [s for s in mine if s.name == names.SPAN_DISPATCH]
    assert len(dispatches) == (3 if SpanGroup.ROLLOUT in groups else 0), label
    job_link = {(jobs[0].trace_id, jobs[0].span_id)} if jobs else set()
    for dispatch in dispatches:
        assert dispatch.parent_id is None, label
        assert set(dispatch.links) == job_link, label
    if SpanGroup.ROLLOUT not in groups and SpanGroup.HTTP in groups:
        runs = [s for s in mine if s.name == "POST /run" and s.kind == "CLIENT"]
        assert len(runs) == 3 and all(s.parent_id is None for s in runs), label


def _check_rules(db: Path, out: Path, run_id: str, outcomes: list[RolloutResult]) -> None:
    """``rollgym traces check`` on this driver run alone: its traces copied to their own store."""
    index = Spans(read_store(db))
    traces = sorted(bytes.fromhex(t) for t in _traces_of_run(index, run_id))
    run_dir = out / run_id
    run_dir.mkdir()
    lines = [orjson.dumps({"rollout_id": o.rollout_id, "trace_id": o.trace_id}) for o in outcomes]
    (run_dir / "rollouts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(SCHEMA)
        conn.execute("ATTACH DATABASE ? AS src", (str(db),))
        conn.execute("CREATE TEMP TABLE wanted (trace_id BLOB PRIMARY KEY)")
        conn.executemany("INSERT INTO wanted VALUES (?)", [(t,) for t in traces])
        for table in ("spans", "links", "dispatches"):
            conn.execute(
                f"INSERT INTO main.{table} SELECT * FROM src.{table} "  # noqa: S608 - fixed names
                "WHERE trace_id IN (SELECT trace_id FROM wanted)"
            )
        conn.execute("INSERT INTO main.resources SELECT * FROM src.resources")
        report = check_run(run_dir, conn)
    finally:
        conn.close()
    assert report.ok, (run_id, report.as_dict())


@pytest.mark.parametrize("server_groups", _subsets(SERVER_GROUPS), ids=_label)
async def test_every_subset_of_groups_keeps_the_trace_shape(
    tmp_path: Path, server_groups: frozenset[SpanGroup]
) -> None:
    runs: list[tuple[frozenset[SpanGroup], str, list[RolloutResult]]] = []
    async with (
        trace_store(tmp_path) as store,
        launched_servers(
            {name: server for name, server in quick_servers(0.0).items() if name in SERVERS},
            tmp_path,
            traces_to=store.endpoint,
            groups=server_groups,
        ) as urls,
    ):
        for number, driver_only in enumerate(_subsets(DRIVER_ONLY)):
            groups = server_groups | driver_only
            run_id = f"d{number}"
            runs.append((groups, run_id, await _drive(urls, groups, run_id, store.endpoint)))
    db = tmp_path / "traces.db"
    index = Spans(read_store(db))
    for groups, run_id, outcomes in runs:
        _check_shape(index, groups, run_id, outcomes)
        _check_rules(db, tmp_path, run_id, outcomes)
