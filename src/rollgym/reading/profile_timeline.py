"""``traces profile``'s timeline in the terminal: rollouts in flight and completions over the
run, one character a bin, from the report's ``timeline`` points (the viewer draws the same
points as a chart).

A ramp that never reaches ``run.concurrency``, a plateau below it, or a long thin tail after
most rollouts finished is visible at a glance; the numbers are the axis, not a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

#: One character a bin, from empty to full.
LEVELS = " ▁▂▃▄▅▆▇█"


def spark(values: Sequence[float], top: float) -> str:
    """``values`` as one line of block characters scaled to ``top`` (a value above 0 never
    shows as blank: one rollout in flight is not none)."""
    if top <= 0:
        return " " * len(values)
    out = []
    for value in values:
        level = round(value / top * (len(LEVELS) - 1))
        if value > 0:
            level = max(1, level)
        out.append(LEVELS[min(level, len(LEVELS) - 1)])
    return "".join(out)


def timeline_lines(points: Sequence[dict[str, Any]]) -> list[str]:
    """The timeline as plain lines: in flight, completions per second, the time axis."""
    if not points:
        return []
    in_flight = [float(p["in_flight"]) for p in points]
    done = [float(p["completions_per_s"]) for p in points]
    width = float(points[0]["width_s"])
    end = float(points[-1]["t_s"]) + width
    most, fastest = max(in_flight), max(done)
    label = f"{end:.3g} s"
    axis = f"0 s{'':{max(1, len(points) - 3 - len(label))}}{label}"
    return [
        f"timeline ({len(points)} bins of {width:.3g} s; a column is one bin)",
        f"  in flight    |{spark(in_flight, most)}| peak {most:.1f}",
        f"  completed/s  |{spark(done, fastest)}| peak {fastest:.1f}/s",
        f"               {'':1}{axis}",
    ]


def print_timeline(console: Console, report: dict[str, Any]) -> None:
    for line in timeline_lines(report.get("timeline") or []):
        console.print(line, markup=False, highlight=False)
