"""A run's store is not waited for to start its servers: its socket is bound before it starts,
so its endpoint is known at once and what is sent before it serves waits in the backlog and is
stored; it says in its ready file when it commits at once (what the first rollout waits for)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.tracestore.store_process import start_trace_store

SPANS = 40


def test_an_unwaited_store_has_its_endpoint_at_once_and_stores_what_came_early(
    tmp_path: Path,
) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log", wait=False)
    try:
        assert store.process.poll() is None
        # nothing announced yet: the endpoint is the socket bound here, before the store ran
        assert not (tmp_path / "store.log.ready.json").exists()
        assert store.endpoint.startswith("http://127.0.0.1:")
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        for i in range(SPANS):
            provider.get_tracer("t").start_span(f"s{i}").end()
        exporter = OTLPSpanExporter(endpoint=store.traces_endpoint, timeout=60)
        assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
        # a run waits for this before its first rollout: the store commits at once now
        assert asyncio.run(store.ready(60)) is True
        assert not (tmp_path / "store.log.ready.json").exists()  # read, then removed
        assert asyncio.run(store.ready(0)) is True
    finally:
        assert store.stop() == 0
    with sqlite3.connect(tmp_path / "traces.db") as db:
        (stored,) = db.execute("SELECT count(*) FROM spans").fetchone()
    assert stored == SPANS
    assert f"rollgym trace store: {store.endpoint}" in (tmp_path / "store.log").read_text()


def test_a_host_that_is_not_an_ipv4_address_is_waited_for(tmp_path: Path) -> None:
    store = start_trace_store(
        tmp_path / "traces.db", tmp_path / "store.log", host="localhost", wait=False
    )
    try:
        assert (tmp_path / "store.log").read_text().count("rollgym trace store: ") == 1
    finally:
        assert store.stop() == 0
