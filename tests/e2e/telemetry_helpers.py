"""Helpers of the telemetry end-to-end tests: traced jobs, span readers, loopback receivers.

The tests assert on the spans that actually arrived at a real OTLP receiver (the run's local
trace store, read here with plain sqlite3, independently of ``rollgym traces``), or in an
in-memory exporter for the driver's own in-process spans. Both are turned into one
:class:`SpanRecord` shape so the same trace-walking helpers check both.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import socket
import sqlite3
import subprocess
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from e2e_support import Job, pythonpath, traces_check

from rollgym.telemetry import names
from server_specs import quickstart_servers, simulated_model

#: OTLP proto span kinds (what the store keeps) and the SDK enum, as one vocabulary.
_PROTO_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER"}


@dataclass(frozen=True)
class SpanRecord:
    """One exported span: ids as lowercase hex, attributes decoded, links as (trace, span)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...] = ()
    service: str | None = None
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def rollout_id(self) -> str | None:
        value = self.attributes.get(names.ROLLOUT_ID)
        return value if isinstance(value, str) else None


def _hex(raw: bytes | None) -> str | None:
    return raw.hex() if raw else None


def read_store(db_path: str | Path) -> list[SpanRecord]:
    """Every span of a trace store file, read-only, with links and resource attributes."""
    conn = sqlite3.connect(f"file:{Path(db_path).resolve()}?mode=ro", uri=True)
    try:
        links: dict[tuple[bytes, bytes], list[tuple[str, str]]] = defaultdict(list)
        for trace_id, span_id, linked_trace, linked_span in conn.execute(
            "SELECT trace_id, span_id, linked_trace_id, linked_span_id FROM links ORDER BY idx"
        ):
            links[(trace_id, span_id)].append((linked_trace.hex(), linked_span.hex()))
        resources = {
            rid: (service, orjson.loads(attrs))
            for rid, service, attrs in conn.execute(
                "SELECT id, service_name, attributes FROM resources"
            )
        }
        out = []
        for trace_id, span_id, parent, name, kind, attrs, rid in conn.execute(
            "SELECT trace_id, span_id, parent_span_id, name, kind, attributes, resource_id "
            "FROM spans"
        ):
            service, resource = resources.get(rid, (None, {}))
            out.append(
                SpanRecord(
                    trace_id=trace_id.hex(),
                    span_id=span_id.hex(),
                    parent_id=_hex(parent),
                    name=name,
                    kind=_PROTO_KINDS.get(kind, str(kind)),
                    attributes=orjson.loads(attrs),
                    links=tuple(links.get((trace_id, span_id), ())),
                    service=service,
                    resource=resource,
                )
            )
        return out
    finally:
        conn.close()


def from_sdk(spans: Iterable[Any]) -> list[SpanRecord]:
    """ReadableSpans of an ``InMemorySpanExporter`` as :class:`SpanRecord` (same vocabulary)."""
    out = []
    for span in spans:
        context = span.get_span_context()
        parent = span.parent
        resource = dict(span.resource.attributes)
        out.append(
            SpanRecord(
                trace_id=format(context.trace_id, "032x"),
                span_id=format(context.span_id, "016x"),
                parent_id=format(parent.span_id, "016x") if parent is not None else None,
                name=span.name,
                kind=span.kind.name,
                attributes=dict(span.attributes or {}),
                links=tuple(
                    (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x"))
                    for link in span.links
                ),
                service=resource.get("service.name"),
                resource=resource,
            )
        )
    return out


class Spans:
    """An index over exported spans: by name, by trace, parent walks, contract checks."""

    def __init__(self, spans: Iterable[SpanRecord]) -> None:
        self.all = list(spans)
        self.by_key = {(s.trace_id, s.span_id): s for s in self.all}
        self.by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
        for span in self.all:
            self.by_trace[span.trace_id].append(span)

    def named(self, name: str) -> list[SpanRecord]:
        return [s for s in self.all if s.name == name]

    def parent(self, span: SpanRecord) -> SpanRecord | None:
        if span.parent_id is None:
            return None
        return self.by_key.get((span.trace_id, span.parent_id))

    def ancestors(self, span: SpanRecord) -> list[SpanRecord]:
        """Parents up to the root (nearest first); stops at a missing parent."""
        chain = []
        current = self.parent(span)
        while current is not None:
            chain.append(current)
            current = self.parent(current)
        return chain

    def root(self, span: SpanRecord) -> SpanRecord:
        chain = self.ancestors(span)
        return chain[-1] if chain else span

    def children(self, span: SpanRecord) -> list[SpanRecord]:
        return [s for s in self.by_trace[span.trace_id] if s.parent_id == span.span_id]

    def dispatch_roots(self) -> dict[str, SpanRecord]:
        """``gym.rollout.dispatch`` roots by their rollout id (ids are asserted unique)."""
        roots: dict[str, SpanRecord] = {}
        for span in self.named(names.SPAN_DISPATCH):
            if span.parent_id is None and span.rollout_id is not None:
                assert span.rollout_id not in roots, f"two dispatch roots for {span.rollout_id}"
                roots[span.rollout_id] = span
        return roots

    def missing_parents(self) -> list[SpanRecord]:
        """Spans naming a parent that is not in their trace (an orphan or a lost span)."""
        return [s for s in self.all if s.parent_id is not None and self.parent(s) is None]

    def owning_dispatch(self, span: SpanRecord) -> SpanRecord | None:
        """The nearest ``gym.rollout.dispatch`` at or above ``span`` (real parents only)."""
        for candidate in (span, *self.ancestors(span)):
            if candidate.name == names.SPAN_DISPATCH:
                return candidate
        return None

    def foreign_spans(self, *, dispatch_is_root: bool = True) -> list[SpanRecord]:
        """The isolation invariant: spans with a rollout id outside that rollout's subtree.

        Checked independently of ``rollgym traces check``: each span carrying
        ``gym.rollout.id`` must walk up (through real parents) to a dispatch span with the same
        id (the trace root in a standalone run), so a span in the right trace id but under
        another rollout's subtree fails too.
        """
        foreign = []
        for span in self.all:
            rollout_id = span.rollout_id
            if rollout_id is None:
                continue
            owner = self.owning_dispatch(span)
            if (
                owner is None
                or owner.rollout_id != rollout_id
                or dispatch_is_root
                and owner.parent_id is not None
            ):
                foreign.append(span)
        return foreign


class TracedJob(Job):
    """A :class:`Job` with telemetry on: its own ``telemetry:`` block and ``OTEL_*`` env."""

    default_telemetry = {"preset": "default"}

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:  # type: ignore[override]
        """The test process's environment without any ``OTEL_*`` variable, plus ``extra``."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        base.pop("_ROLLGYM_TELEMETRY", None)
        return {**base, "PYTHONPATH": pythonpath(), **(extra or {})}

    def run(  # type: ignore[override]
        self,
        *overrides: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 180,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command(*overrides), "--no-table"],
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )

    @property
    def db(self) -> Path:
        return self.out / "traces.db"

    def spans(self) -> Spans:
        return Spans(read_store(self.db))

    def traces_check(self) -> subprocess.CompletedProcess[str]:
        return traces_check(self.out, env=self.env())


# --- server sets ---------------------------------------------------------------------------------
def quick_servers(latency_s: float = 0.0, *, episodes: bool = True) -> dict[str, Any]:
    """A model, both built-in environments, a single-turn and a tool-loop agent
    (:func:`server_specs.quickstart_servers`, the model answering after ``latency_s``).

    With ``episodes`` the keychain environment plays episode ``/run`` rows itself.
    """
    return quickstart_servers(model=simulated_model(latency_s), episodes=episodes)


def quick_rows(n_arith: int, n_keys: int, n_episodes: int) -> list[dict[str, Any]]:
    """Rows of the quickstart's three kinds: arithmetic, keychain walks, keychain episodes."""
    here = Path(__file__).resolve().parents[2] / "examples" / "quickstart.jsonl"
    source = [orjson.loads(line) for line in here.read_bytes().splitlines() if line.strip()]
    arith = [r for r in source if r.get("agent") == "solver"]
    keys = [r for r in source if r.get("agent") == "walker"]
    episodes = [r for r in source if isinstance(r.get("task_id"), dict)]
    assert len(arith) >= n_arith and len(keys) >= n_keys and len(episodes) >= n_episodes
    return arith[:n_arith] + keys[:n_keys] + episodes[:n_episodes]


def quickstart_job(
    root: Path,
    rows: list[dict[str, Any]] | None = None,
    *,
    latency_s: float = 0.0,
    telemetry: Mapping[str, Any] | None = None,
    **run: Any,
) -> TracedJob:
    """A traced job of the quickstart's servers (:func:`quick_servers`, the model answering
    after ``latency_s``) and ``rows`` (default: 20 arithmetic, 10 walks, 10 episodes), played
    by the ``solver`` with keychain episodes routed to ``keys``; telemetry at the default
    preset with the keys of ``telemetry``; ``run`` the rest of the ``run:`` block."""
    job = TracedJob(root)
    job.write(
        quick_servers(latency_s),
        rows if rows is not None else quick_rows(20, 10, 10),
        telemetry={"preset": "default", **(telemetry or {})},
        agent="solver",
        environment_routes={"keychain_episodes": "keys"},
        **run,
    )
    return job


# --- loopback endpoints --------------------------------------------------------------------------
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Answer500(http.server.BaseHTTPRequestHandler):
    """Reads each request and answers 500: an OTLP endpoint that rejects everything."""

    hits = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).hits += 1
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def failing_endpoint() -> Iterator[tuple[str, type[_Answer500]]]:
    """``(base URL, handler class)`` of a loopback HTTP server answering 500 to every POST."""
    handler = type("Answer500", (_Answer500,), {"hits": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- in-process: real servers for the library API ------------------------------------------------
@asynccontextmanager
async def launched_servers(
    servers: dict[str, Any],
    out: Path,
    *,
    traces_to: str | None,
    run_id: str = "e2e-run",
    groups: Iterable[Any] | None = None,
) -> AsyncIterator[dict[str, str]]:
    """Launch ``servers`` with the real launcher; their spans go over OTLP to ``traces_to``.

    ``traces_to`` is an OTLP/HTTP base URL (the trace store's endpoint); None launches them with
    tracing off. ``groups`` are the servers' span groups (default: all). Yields
    ``{name: base URL}``; the servers flush and stop on leaving.
    """
    from rollgym.config import JobConfig
    from rollgym.placement.launcher import launch_servers
    from rollgym.telemetry.groups import ALL_GROUPS
    from rollgym.telemetry.settings import TelemetrySettings, server_env

    rows = out / "unused.jsonl"
    rows.parent.mkdir(parents=True, exist_ok=True)
    rows.write_text("{}\n", encoding="utf-8")
    config = JobConfig.model_validate(
        {"run": {"input": str(rows), "output_dir": str(out)}, "servers": servers}
    )
    if traces_to is None:
        settings = TelemetrySettings(run_id=run_id)
    else:
        settings = TelemetrySettings(
            groups=ALL_GROUPS if groups is None else frozenset(groups),
            traces_exporter="otlp",
            endpoint=traces_to,
            schedule_delay_ms=100,
            run_id=run_id,
        )
    async with launch_servers(
        config, run_id=run_id, output_dir=out, env=server_env(settings)
    ) as urls:
        yield urls


@asynccontextmanager
async def trace_store(out: Path) -> AsyncIterator[Any]:
    """The rollgym trace store as a child process; stopped (and committed) on leaving."""
    from rollgym.tracestore.store_process import start_trace_store

    store = await asyncio.to_thread(
        start_trace_store, out / "traces.db", out / "logs" / "tracestore.log"
    )
    try:
        yield store
    finally:
        await store.astop()
