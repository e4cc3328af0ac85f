"""Span counts at shutdown, held against what a real OTLP backend received.

The same traced job three times, exporting to an OTLP/HTTP sink on loopback that decodes every
request and counts the span ids it received whole (:mod:`otlp_sink`): answering at once, slow
(reads each request whole, answers a minute later: the client gave up long before), and a
tarpit (reads slowly, never answers). Whatever the backend did, the counts rollgym reports
(``summary.json``, each server's ``logs/<name>.telemetry.json``, the console line) must be
true: every span the sink received is delivered or unknown, never dropped; nothing is counted
twice; delivered spans were received.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from otlp_sink import OtlpSink
from telemetry_helpers import TracedJob, quickstart_job

from waits import settled

pytestmark = pytest.mark.e2e

#: A short request timeout (2 s, in milliseconds as the spec says): the slow sink and the tarpit outlast several of them in the run.
EXPORT_TIMEOUT_MS = "2000"
#: ``telemetry.flush_timeout_s``: each process gives up on its backlog this long after the end.
FLUSH_S = 5.0
_COUNTS = ("spans_exported", "spans_dropped", "spans_unknown")


class Outcome:
    """One run against one sink: what rollgym said and what the sink got."""

    def __init__(self, job: TracedJob, stderr: str, received: int, duplicates: int) -> None:
        self.job = job
        self.stderr = stderr
        self.received = received
        self.duplicates = duplicates
        self.telemetry: dict[str, Any] = job.summary["telemetry"]

    @property
    def total(self) -> int:
        return sum(self.telemetry[key] for key in _COUNTS)


def _run(root: Path, mode: str) -> Outcome:
    job = quickstart_job(root, telemetry={"flush_timeout_s": FLUSH_S}, repeats=20, concurrency=32)
    with OtlpSink(mode, answer_after_s=60.0, read_bytes_per_s=100_000) as sink:
        proc = job.run(
            env={
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
                "OTEL_EXPORTER_OTLP_TIMEOUT": EXPORT_TIMEOUT_MS,
            },
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        received = len(settled(sink.span_ids))
        return Outcome(job, proc.stderr, received, sink.duplicates())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("counts")
    return {mode: _run(root / mode, mode) for mode in ("ok", "slow", "tarpit")}


def test_a_backend_that_answers_gets_every_span_and_all_are_delivered(
    runs: dict[str, Outcome],
) -> None:
    ok = runs["ok"]
    assert ok.telemetry["spans_dropped"] == ok.telemetry["spans_unknown"] == 0
    assert ok.telemetry["spans_exported"] == ok.received > 0
    assert ok.duplicates == 0


@pytest.mark.parametrize("mode", ["slow", "tarpit"])
def test_every_span_the_backend_received_is_delivered_or_unknown_never_dropped(
    runs: dict[str, Outcome], mode: str
) -> None:
    run = runs[mode]
    counts = run.telemetry
    # the case bites: the backend got spans, and rollgym had to give up on others
    assert run.received > 0 and counts["spans_dropped"] > 0 and counts["spans_unknown"] > 0
    assert run.received <= counts["spans_exported"] + counts["spans_unknown"], counts
    assert counts["spans_exported"] <= run.received
    assert run.duplicates == 0  # an unknown batch is never sent again
    # every span is counted once: the same job made as many spans as the answered run's
    assert run.total == runs["ok"].total, counts


@pytest.mark.parametrize("mode", ["slow", "tarpit"])
def test_the_files_and_the_console_line_say_the_same_counts(
    runs: dict[str, Outcome], mode: str
) -> None:
    run = runs[mode]
    counts = run.telemetry
    servers = [
        orjson.loads(path.read_bytes())
        for path in sorted((run.job.out / "logs").glob("*.telemetry.json"))
    ]
    assert servers, "no server left its span counts"
    for key in _COUNTS:
        assert sum(record[key] for record in servers) <= counts[key]
    line = next(line for line in run.stderr.splitlines() if "span(s) delivered" in line)
    match = re.search(
        r"(\d+) of (\d+) span\(s\) delivered.*?(\d+) NOT delivered, (\d+) unknown", line
    )
    assert match, line
    exported, total, dropped, unknown = map(int, match.groups())
    assert (exported, total, dropped, unknown) == (
        counts["spans_exported"],
        run.total,
        counts["spans_dropped"],
        counts["spans_unknown"],
    )
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr
