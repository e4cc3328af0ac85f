"""What a dead OTLP endpoint costs a small run: the same 2-row quickstart job, side by side.

Three runs, one after the other: export off (``OTEL_TRACES_EXPORTER=none``), the run's own
local trace store (the default), and ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a closed loopback
port. Prints each run's wall time and the ratio of the dead-endpoint run to the export-off
run. Before the start-up probe every process retried every batch for
``telemetry.flush_timeout_s``, so the dead-endpoint run took minutes; now it is found by one
connect and costs about what export off costs.

    python bench/dead_endpoint.py [--rows 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _jobs import REPO, quickstart_run


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(root: Path, label: str, rows: Path, extra_env: dict[str, str]) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = root / label
    command = quickstart_run(
        out,
        f"run.input={rows}",
        "run.repeats=1",
        "--no-table",
    )
    start = time.perf_counter()
    done = subprocess.run(command, env={**env, **extra_env}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{label}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return wall, orjson.loads((out / "summary.json").read_bytes())["telemetry"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollgym-dead-endpoint-") as tmp:
        root = Path(tmp)
        rows = root / "rows.jsonl"
        lines = (REPO / "examples" / "quickstart.jsonl").read_text().splitlines()
        rows.write_text("\n".join(lines[: args.rows]) + "\n")
        dead = f"http://127.0.0.1:{_closed_port()}"
        runs = {
            "export off": {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
            "local trace store": {},
            "dead endpoint": {"OTEL_EXPORTER_OTLP_ENDPOINT": dead},
        }
        walls = {}
        for label, extra in runs.items():
            wall, telemetry = run(root, label.replace(" ", "-"), rows, extra)
            walls[label] = wall
            print(f"{label:>18}: {wall:6.1f} s  telemetry {telemetry}")
        ratio = walls["dead endpoint"] / walls["export off"]
        print(f"dead endpoint / export off: {ratio:.2f}x wall time ({args.rows} rows)")


if __name__ == "__main__":
    main()
