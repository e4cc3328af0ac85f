"""Tail sampling against an unsampled run of the same rows, side by side in one run.

Two real runs (the real CLI, the simulated model, the arithmetic and keychain environments,
the single-turn and tool-loop agents, the local trace store) over the same ``-n`` rows, a
``--failures`` share of them broken (a keychain walk whose seed is not a number: the
environment refuses the task, the rollout fails): first unsampled, then with
``telemetry.tail_sampling`` (``--share``, ``--slow-percentile``). The simulated model's answers
are seeded per request, so a rollout makes the same spans in both runs. Printed:

- traces and spans of each run, and the kept share of the spans (the volume a backend takes);
- kept traces by reason, and the dropped ones, from ``summary.json``;
- whether every failed rollout's trace is kept whole (its spans those of the unsampled run);
- whether every kept rollout's spans are exactly those of the unsampled run, and every dropped
  one is gone whole;
- ``rollgym traces check``'s exit status on the tail-sampled run; each run's wall time;
- the store's peak span count while each run went (polled twice a second): the unsampled
  run's store grows to every span, the tail-sampled one holds what is kept plus about a
  grace period's worth of undecided and not yet removed spans;
- with ``--otlp`` (the default), the tail-sampled run exports to an OTLP/HTTP sink on loopback
  (``tests/faults/otlp_sink.py``), and how soon after its decision (the end of its dispatch
  span) each kept rollout's root span reached it: median, 90th percentile, largest, and how
  many kept rollouts reached it before the last rollout ended; the sink's spans against the
  store's (exactly the kept ones, none twice).

    python bench/tail_sampling.py [-n 10000] [--failures 0.05] [--share 0.1]
                                  [--slow-percentile 99] [--concurrency 64] [--no-otlp]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _jobs import REPO, simulated_model, write_job

sys.path.insert(0, str(REPO / "tests" / "faults"))
from otlp_sink import OtlpSink  # noqa: E402 - the tests' OTLP sink, a real HTTP backend

Shape = Counter[tuple[str, str]]


def _servers() -> dict[str, Any]:
    return {
        "policy": simulated_model(0.0),
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "keys": {"kind": "environment", "impl": "keychain"},
        "solver": {
            "kind": "agent",
            "impl": "single_turn",
            "model": "policy",
            "environment": "arith",
        },
        "walker": {
            "kind": "agent",
            "impl": "tool_loop",
            "model": "policy",
            "environment": "keys",
            "max_turns": 12,
        },
    }


def _rows(n: int, failures: float) -> list[dict[str, Any]]:
    """``n`` rows cycled from the quickstart's arithmetic and walks; every ``1/failures``-th
    one a broken walk."""
    source = [
        json.loads(line)
        for line in (REPO / "examples" / "quickstart.jsonl").read_text().splitlines()
        if line.strip()
    ]
    ordinary = [r for r in source if r.get("agent") in ("solver", "walker")]
    every = round(1 / failures) if failures > 0 else 0
    rows = []
    for i in range(n):
        if every and i % every == every - 1:
            rows.append({"agent": "walker", "seed": f"broken-{i}", "hops": 2})
        else:
            rows.append(ordinary[i % len(ordinary)])
    return rows


def _run(
    root: Path,
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    tail: bool,
    endpoint: str | None = None,
) -> tuple[float, int, int]:
    """One run; (wall seconds, the store's peak span count, when its last row was written in
    ``time.time_ns()``)."""
    root.mkdir(parents=True)
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    telemetry: dict[str, Any] = {"preset": "default"}
    if tail:
        telemetry["tail_sampling"] = {
            "share": args.share,
            "slow_percentile": args.slow_percentile,
        }
    config = {
        "run": {
            "input": str(root / "rows.jsonl"),
            "output_dir": str(root / "out"),
            "agent": "solver",
            "concurrency": args.concurrency,
            "max_attempts": 1,
        },
        "servers": _servers(),
        "telemetry": telemetry,
    }
    path = write_job(root, config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO / "src")
    if endpoint is not None:
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
        )
    db, written = root / "out" / "traces.db", root / "out" / "rollouts.jsonl"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollgym", "run", str(path), "--no-table"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    peak = last_row_ns = 0
    size = -1
    while proc.poll() is None:
        time.sleep(0.5)
        peak = max(peak, _span_count(db))
        now = written.stat().st_size if written.exists() else -1
        if now != size:
            size, last_row_ns = now, time.time_ns()
    _, stderr = proc.communicate()
    if proc.returncode not in (0, 1):
        sys.exit(f"the run failed ({proc.returncode}): {stderr[-2000:]}")
    return time.perf_counter() - t0, max(peak, _span_count(db)), last_row_ns


def _span_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            (count,) = conn.execute("SELECT count(*) FROM spans").fetchone()
            return int(count)
    except sqlite3.Error:
        return 0  # not made yet


def _roots(db: Path) -> dict[str, tuple[bytes, int]]:
    """Each rollout's root dispatch span: rollout id -> (span id, end ns)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT d.rollout_id, s.span_id, s.end_ns FROM dispatches d "
            "JOIN spans s ON s.trace_id = d.trace_id AND s.span_id = d.span_id "
            "WHERE d.is_root = 1"
        ).fetchall()
    return {rollout_id: (span_id, end_ns) for rollout_id, span_id, end_ns in rows}


def _shapes(db: Path) -> dict[str, Shape]:
    """Each rollout's spans as (name, parent's name) pairs, by rollout id."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT s.name, p.name, d.rollout_id FROM spans s "
            "JOIN dispatches d ON d.trace_id = s.trace_id AND d.is_root = 1 "
            "LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_span_id"
        ).fetchall()
    out: dict[str, Shape] = {}
    for name, parent, rollout_id in rows:
        out.setdefault(rollout_id, Counter())[(name, parent or "")] += 1
    return out


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="rollouts per run")
    parser.add_argument("--failures", type=float, default=0.05, help="share of broken rows")
    parser.add_argument("--share", type=float, default=0.1, help="kept share of the rest")
    parser.add_argument("--slow-percentile", type=float, default=99.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--no-otlp",
        dest="otlp",
        action="store_false",
        help="the tail-sampled run keeps its traces in its store only (no OTLP sink)",
    )
    args = parser.parse_args()
    rows = _rows(args.n, args.failures)
    with tempfile.TemporaryDirectory(prefix="rollgym-tail-") as tmp, _sink(args.otlp) as sink:
        full_dir, tail_dir = Path(tmp) / "full", Path(tmp) / "tail"
        full_s, full_peak, _ = _run(full_dir, rows, args, tail=False)
        endpoint = sink.url if sink is not None else None
        tail_s, tail_peak, last_row_ns = _run(tail_dir, rows, args, tail=True, endpoint=endpoint)
        roots = _roots(tail_dir / "out" / "traces.db")
        stored_ids = _stored_span_ids(tail_dir / "out" / "traces.db")
        full, tail = (
            _shapes(full_dir / "out" / "traces.db"),
            _shapes(tail_dir / "out" / "traces.db"),
        )
        out = tail_dir / "out"
        failures = _lines(out / "failures.jsonl")
        results = _lines(out / "rollouts.jsonl")
        kept_rows = [r for r in results if r.get("trace_sampled", True)]
        dropped_rows = [r for r in results if r.get("trace_sampled") is False]
        counts = json.loads((out / "summary.json").read_text())["telemetry"]["tail_sampling"]
        check = subprocess.run(
            [sys.executable, "-m", "rollgym", "traces", "check", str(out)],
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            capture_output=True,
            text=True,
        )

    full_spans = sum(sum(s.values()) for s in full.values())
    tail_spans = sum(sum(s.values()) for s in tail.values())
    failed_whole = sum(
        1 for f in failures if tail.get(f["rollout_id"]) == full.get(f["rollout_id"])
    )
    kept_same = sum(1 for r in kept_rows if tail.get(r["rollout_id"]) == full.get(r["rollout_id"]))
    dropped_gone = sum(1 for r in dropped_rows if r["rollout_id"] not in tail)
    print(
        f"{args.n} rollouts, {args.failures:.0%} broken rows, share {args.share:.0%}, "
        f"slow percentile {args.slow_percentile}, concurrency {args.concurrency}"
    )
    print(f"{'':34}{'unsampled':>12}{'tail-sampled':>14}")
    print(f"{'rollout traces':34}{len(full):>12}{len(tail):>14}")
    print(f"{'rollout spans':34}{full_spans:>12}{tail_spans:>14}")
    print(f"{'kept span volume':34}{'100.0%':>12}{tail_spans / max(1, full_spans):>14.1%}")
    print(f"{'kept traces':34}{'':>12}{len(tail) / max(1, len(full)):>14.1%}")
    print(f"{'wall time (s)':34}{full_s:>12.1f}{tail_s:>14.1f}")
    print(f"{'store peak spans (while running)':34}{full_peak:>12}{tail_peak:>14}")
    print(f"kept by reason: {counts['traces_kept_by_reason']}; dropped {counts['traces_dropped']}")
    print(
        f"spans removed from the store: {counts.get('spans_removed')} "
        f"({counts.get('spans_removed_before_end')} while the run went; grace "
        f"{counts.get('grace_s')} s)"
    )
    if sink is not None:
        _print_forwarding(sink, counts, kept_rows + failures, roots, stored_ids, last_row_ns)
    print(f"failed rollouts kept whole: {failed_whole} of {len(failures)}")
    print(f"kept rollouts with exactly their unsampled spans: {kept_same} of {len(kept_rows)}")
    print(f"dropped rollouts gone whole: {dropped_gone} of {len(dropped_rows)}")
    print(f"rollgym traces check: exit {check.returncode}")


@contextlib.contextmanager
def _sink(on: bool) -> Iterator[OtlpSink | None]:
    if not on:
        yield None
        return
    with OtlpSink("ok") as sink:
        yield sink


def _stored_span_ids(db: Path) -> set[bytes]:
    with sqlite3.connect(db) as conn:
        return {span_id for (span_id,) in conn.execute("SELECT span_id FROM spans")}


def _print_forwarding(
    sink: OtlpSink,
    counts: dict[str, Any],
    kept: list[dict[str, Any]],
    roots: dict[str, tuple[bytes, int]],
    stored: set[bytes],
    last_row_ns: int,
) -> None:
    """How soon after its decision each kept rollout's root span reached the backend."""
    arrivals = sink.arrivals()
    delays, before_end = [], 0
    for row in kept:
        root = roots.get(row["rollout_id"])
        arrived = arrivals.get(root[0]) if root else None
        if root is None or arrived is None:
            continue
        delays.append((arrived[1] - root[1]) / 1e9)
        before_end += arrived[1] < last_row_ns
    print(
        f"OTLP sink: {len(arrivals)} spans received ({sink.duplicates()} twice), "
        f"{'exactly' if set(arrivals) == stored else 'NOT'} the store's kept spans; "
        f"forwarded {counts.get('spans_forwarded')}, failed {counts.get('spans_forward_failed')}, "
        f"late {counts.get('spans_forwarded_late')}"
    )
    if delays:
        cuts = statistics.quantiles(delays, n=10) if len(delays) > 1 else delays * 9
        print(
            f"decision -> backend, kept rollouts ({len(delays)}): median "
            f"{statistics.median(delays):.2f} s, p90 {cuts[-1]:.2f} s, max {max(delays):.2f} s; "
            f"{before_end} of them there before the last rollout ended"
        )


if __name__ == "__main__":
    main()
