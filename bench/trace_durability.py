"""Trace durability: how long after a rollout is recorded its spans are committed, and what
a ``kill -9`` of the driver leaves.

Runs the quickstart with its own trace store and watches two files side by side: each line of
``rollouts.jsonl`` (when it appeared) and ``traces.db`` (when that rollout's dispatch span, the
last of its spans to end, is there). Prints the median, 95th percentile and largest delay from
a rollout's line to its dispatch span committed. With ``--kill-after S`` the driver is killed
(SIGKILL) ``S`` seconds after the first rollout line; the bench then counts the recorded
rollouts whose trace is in the store, and those whose trace is not.

``--cold`` runs every process without compiled bytecode (a fresh, unwritten bytecode cache):
the first run after an install, when start-up is slowest.

    python bench/trace_durability.py --cold
    python bench/trace_durability.py --cold --kill-after 2
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _jobs import quickstart_run  # noqa: E402

POLL_S = 0.05


def _committed(db: Path, trace_ids: list[str]) -> set[str]:
    """The trace ids of ``trace_ids`` whose dispatch span the store has committed."""
    if not db.exists() or not trace_ids:
        return set()
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            found = set()
            for trace_id in trace_ids:
                row = conn.execute(
                    "SELECT 1 FROM dispatches WHERE trace_id = ? LIMIT 1",
                    (bytes.fromhex(trace_id),),
                ).fetchone()
                if row is not None:
                    found.add(trace_id)
            return found
        finally:
            conn.close()
    except sqlite3.Error:  # not created yet, or its schema not yet written
        return set()


def _new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The whole lines of ``path`` from ``offset``, and the offset after them."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    import orjson

    ids = []
    for line in data[:end].splitlines():
        row = orjson.loads(line)
        if isinstance(row.get("trace_id"), str):
            ids.append(row["trace_id"])
    return ids, offset + end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="no compiled bytecode anywhere")
    parser.add_argument("--kill-after", type=float, default=None, metavar="S")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        env = dict(os.environ)
        if args.cold:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "no-bytecode")
        command = quickstart_run(out, f"run.repeats={args.repeats}", "--no-table")
        started = time.monotonic()
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        seen: dict[str, float] = {}
        done: dict[str, float] = {}
        offset = 0
        first: float | None = None
        killed_at: float | None = None
        while True:
            now = time.monotonic()
            ids, offset = _new_lines(out / "rollouts.jsonl", offset)
            for trace_id in ids:
                seen.setdefault(trace_id, now)
            if seen and first is None:
                first = now
            waiting = [t for t in seen if t not in done]
            for trace_id in _committed(out / "traces.db", waiting):
                done[trace_id] = now
            if args.kill_after is not None and first is not None and now - first >= args.kill_after:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed_at = now
                break
            if proc.poll() is not None and not waiting:
                break
            if proc.poll() is not None and now - started > 600:
                break
            time.sleep(POLL_S)
        if killed_at is not None:
            time.sleep(3)  # the store dies with the driver; nothing more is committed
            recorded = list(seen)
            kept = _committed(out / "traces.db", recorded)
            print(
                f"driver killed {args.kill_after:g} s after the first rollout line "
                f"({killed_at - started:.1f} s after start): {len(recorded)} rollouts recorded, "
                f"{len(kept)} with their dispatch span in traces.db, "
                f"{len(recorded) - len(kept)} without"
            )
            late = sorted(killed_at - seen[t] for t in recorded if t not in kept)
            if late:
                print(f"  the oldest without a trace was recorded {late[-1]:.2f} s before the kill")
            return
        delays = sorted(done[t] - seen[t] for t in done)
        if not delays:
            print("no rollout committed")
            return
        first_at = (first or started) - started
        p95 = delays[int(0.95 * (len(delays) - 1))]
        print(
            f"{len(seen)} rollouts, first recorded {first_at:.1f} s after start; line -> "
            f"dispatch span committed: median {statistics.median(delays):.2f} s, "
            f"p95 {p95:.2f} s, max {delays[-1]:.2f} s (poll {POLL_S:g} s)"
        )


if __name__ == "__main__":
    main()
