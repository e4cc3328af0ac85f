"""Cost of a disabled span call site, as a ratio to a bare call of the work it wraps.

Every span-only call site in rollgym has the shape below: one attribute load of the
precomputed gate and a branch, then the same call as without telemetry. This measures both
statements side by side in one run (timeit, several repeats, the minimum of each), so machine
speed cancels out of the ratio. Target (TELEMETRY.md "Cost when off"): ratio <= 1.5.

    python bench/disabled_site.py
"""

from __future__ import annotations

import timeit

from rollgym.telemetry.groups import configure_gate, gate

SITE = """
if gate.rollout:
    with dispatch_span(row, "agent", "agent"):
        f(row)
else:
    f(row)
"""
BARE = "f(row)"
TARGET = 1.5


def f(row: dict[str, int]) -> None:
    """Stands in for the wrapped work; as cheap as a call can be, the worst case for the ratio."""
    return None


def measure(number: int = 2_000_000, repeat: int = 7) -> tuple[float, float]:
    """(site ns per call, bare ns per call), minimum over repeats, interleaved."""
    configure_gate((), tracing_active=False)
    env = {"gate": gate, "f": f, "row": {"task_index": 0}, "dispatch_span": None}
    site_t, bare_t = [], []
    for _ in range(repeat):
        bare_t.append(timeit.timeit(BARE, globals=env, number=number))
        site_t.append(timeit.timeit(SITE, globals=env, number=number))
    return min(site_t) / number * 1e9, min(bare_t) / number * 1e9


def main() -> int:
    site, bare = measure()
    ratio = site / bare
    print(f"bare call:              {bare:6.1f} ns")
    print(f"disabled gated site:    {site:6.1f} ns")
    print(f"ratio (target <= {TARGET}): {ratio:.2f}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
