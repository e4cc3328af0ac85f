"""Driver peak memory does not grow with the input: 30,000 vs 300,000 rows.

Each size runs the full ``run_job`` path (rows streamed from a JSONL file, admission, dispatch,
rollouts.jsonl, summary.json, progress.json) at concurrency 256 against the minimal loopback
agent given by ``url:``, telemetry off, in its own driver subprocess; its peak RSS comes from
``resource.getrusage``. Target: the larger within 10% of the smaller, and under 300 MB.

``--tracing`` instead runs the larger size twice, telemetry off and with the default preset
exporting to the run's local trace store (rollgym's own span pipeline), and prints the traced
driver's peak RSS as a ratio to the untraced one (target <= 1.20). The driver's RSS excludes
its children (trace store, span exporter process); the largest child's peak is printed apart.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import event_loop  # noqa: E402


def write_job(folder: Path, url: str, rows: int, preset: str = "off") -> Path:
    rows_path = folder / "rows.jsonl"
    with open(rows_path, "w", encoding="utf-8") as handle:
        for i in range(rows):
            handle.write(f'{{"question": "{i} + 1", "meta": {{"id": {i}}}}}\n')
    config = {
        "run": {
            "input": str(rows_path),
            "output_dir": str(folder / "out"),
            "agent": "minimal",
            "concurrency": 256,
            "progress_interval_s": 3600,
        },
        "servers": {"minimal": {"kind": "agent", "url": url}},
        "telemetry": {"preset": preset, "exporter": "none" if preset == "off" else "auto"}
        | {"metrics": False},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def child(config_path: str) -> dict[str, float]:
    from rollgym import load_config, run_job

    start = time.perf_counter()
    summary = event_loop.run(run_job(load_config(config_path)))
    return {
        "completed": summary.completed,
        "requested": summary.requested,
        "wall_s": time.perf_counter() - start,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "children_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "spans_dropped": summary.telemetry.get("spans_dropped", 0)
        if isinstance(getattr(summary, "telemetry", None), dict)
        else 0,
    }


def run_size(url: str, rows: int, preset: str = "off") -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = write_job(Path(tmp), url, rows, preset)
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(config)],
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10,000 vs 100,000 rows")
    parser.add_argument("--tracing", action="store_true", help="off vs traced, larger size")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    small, large = (10_000, 100_000) if args.quick else (30_000, 300_000)
    if args.tracing:
        compare_tracing(large)
        return
    with AgentProcess() as agent:
        results = {rows: run_size(agent.url, rows) for rows in (small, large)}
    for rows, result in results.items():
        assert result["completed"] == result["requested"] == rows, result
        print(
            f"{rows:>8,} rows: peak RSS {result['peak_rss_mb']:6.1f} MB, "
            f"{result['wall_s']:.1f} s ({rows / result['wall_s']:,.0f} rollouts/s)"
        )
    ratio = results[large]["peak_rss_mb"] / results[small]["peak_rss_mb"]
    print(f"peak RSS ratio {large:,} / {small:,} rows: {ratio:.3f} (target <= 1.10, and < 300 MB)")


def compare_tracing(rows: int) -> None:
    with AgentProcess() as agent:
        results = {preset: run_size(agent.url, rows, preset) for preset in ("off", "default")}
    for preset, result in results.items():
        assert result["completed"] == result["requested"] == rows, result
        print(
            f"{rows:>8,} rows, telemetry {preset:>7}: driver peak RSS "
            f"{result['peak_rss_mb']:6.1f} MB (largest child {result['children_peak_rss_mb']:.1f}"
            f" MB), {result['wall_s']:.1f} s ({rows / result['wall_s']:,.0f} rollouts/s)"
        )
    ratio = results["default"]["peak_rss_mb"] / results["off"]["peak_rss_mb"]
    print(f"driver peak RSS traced / off: {ratio:.3f} (target <= 1.20)")


if __name__ == "__main__":
    main()
