"""The run's metrics, derived from its spans: what a metrics backend would hold, with none.

Why derive rather than store: a run exporting to its local trace store has metrics export
off (the store acknowledges OTLP metrics and keeps none). Every value the profile and the
viewer need is measured on a span too, by the same code that feeds the instrument, so it can
be read back from the traces, per rollout and per request rather than per process and export
interval, and it can never disagree with the traces beside it.

Derived here (:data:`DERIVED`), each as the data points the instrument would report:
``gym.rollout.completed``, ``gym.rollout.duration``, ``gym.rollout.reward``,
``gym.rollout.in_flight`` (its peak), ``gym.http.client.queue_duration``,
``gym.http.client.connections`` (its peak) and ``gym.sandbox.exec.duration``.

Not derivable (:data:`NOT_DERIVED`): ``gym.telemetry.spans.dropped`` (a dropped span is not
in the store; each process's counts are in ``logs/<server>.telemetry.json`` and
``rollgym traces check`` reads them), and the warm pool's gauges
``gym.sandbox.pool.size`` / ``gym.sandbox.pool.waiting`` (pool state, not work done: no span
records them; a metrics backend is needed for those).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw

from rollgym.identity import base_rollout_id
from rollgym.telemetry import names

_SECOND = 1e9
_KIND_CLIENT = 3

#: Metric name -> what it is derived from.
DERIVED: dict[str, str] = {
    names.METRIC_ROLLOUT_COMPLETED: "the last attempt of each rollout's dispatch spans "
    "(dispatch name, outcome)",
    names.METRIC_ROLLOUT_DURATION: "first attempt's start to last attempt's end, per rollout",
    names.METRIC_ROLLOUT_REWARD: "the reward on each rollout's last dispatch span",
    names.METRIC_ROLLOUT_IN_FLIGHT: "overlap of the rollouts' windows (peak per dispatch name)",
    names.METRIC_HTTP_CLIENT_QUEUE_DURATION: f"`{names.HTTP_CLIENT_QUEUE_DURATION}` on each "
    "HTTP client span",
    names.METRIC_HTTP_CLIENT_CONNECTIONS: "overlap of the HTTP client spans (peak per destination)",
    names.METRIC_SANDBOX_EXEC_DURATION: f"the `{names.SPAN_SANDBOX_EXEC}` spans' durations",
}
#: Metric name -> why it is not derived, and where its numbers are instead.
NOT_DERIVED: dict[str, str] = {
    names.METRIC_SPANS_DROPPED: "a dropped span never reaches the store; the counts are in "
    "logs/<server>.telemetry.json (rollgym traces check reads them)",
    names.METRIC_SANDBOX_POOL_SIZE: "warm-pool state, recorded by no span: needs a backend",
    names.METRIC_SANDBOX_POOL_WAITING: "warm-pool state, recorded by no span: needs a backend",
}


def _histogram(attributes: dict[str, object], values: list[float]) -> dict[str, object]:
    return {
        "attributes": attributes,
        "count": len(values),
        "sum": sum(values),
        "min": min(values),
        "max": max(values),
    }


def _peak(intervals: Iterable[tuple[int, int]]) -> int:
    """Most intervals open at once (an interval ending where another starts: not both)."""
    events = sorted(e for lo, hi in intervals for e in ((lo, 1), (hi, -1)))
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def derive_metrics(conn: apsw.Connection) -> dict[str, list[dict[str, object]]]:
    """Every metric of :data:`DERIVED` as a list of data points (``attributes`` and
    ``value`` for counters and peaks; ``count``, ``sum``, ``min``, ``max`` for histograms)."""
    rollouts = _rollouts(conn)
    completed: dict[tuple[str, str], int] = {}
    durations: dict[tuple[str, str], list[float]] = {}
    rewards: dict[str, list[float]] = {}
    windows: dict[str, list[tuple[int, int]]] = {}
    for name, outcome, reward, lo, hi in rollouts:
        key = (name, outcome)
        completed[key] = completed.get(key, 0) + 1
        durations.setdefault(key, []).append((hi - lo) / _SECOND)
        if reward is not None:
            rewards.setdefault(name, []).append(reward)
        windows.setdefault(name, []).append((lo, hi))

    def outcome_attrs(key: tuple[str, str]) -> dict[str, object]:
        return {names.DISPATCH_NAME: key[0], names.ROLLOUT_OUTCOME: key[1]}

    queue: dict[str, list[float]] = {}
    requests: dict[str, list[tuple[int, int]]] = {}
    for destination, seconds, start, end in conn.execute(
        f"SELECT json_extract(attributes, '$.\"{names.DESTINATION_SERVER_NAME}\"'), "
        f"json_extract(attributes, '$.\"{names.HTTP_CLIENT_QUEUE_DURATION}\"'), start_ns, end_ns "
        f"FROM spans WHERE kind = {_KIND_CLIENT}"
    ):
        if not isinstance(destination, str):
            continue
        requests.setdefault(destination, []).append((start, end))
        if isinstance(seconds, (int, float)) and seconds >= 0:
            queue.setdefault(destination, []).append(float(seconds))
    execs = [
        (end - start) / _SECOND
        for start, end in conn.execute(
            "SELECT start_ns, end_ns FROM spans WHERE name = ?", (names.SPAN_SANDBOX_EXEC,)
        )
    ]
    destination_key = names.DESTINATION_SERVER_NAME
    return {
        names.METRIC_ROLLOUT_COMPLETED: [
            {"attributes": outcome_attrs(k), "value": v} for k, v in sorted(completed.items())
        ],
        names.METRIC_ROLLOUT_DURATION: [
            _histogram(outcome_attrs(k), v) for k, v in sorted(durations.items())
        ],
        names.METRIC_ROLLOUT_REWARD: [
            _histogram({names.DISPATCH_NAME: k}, v) for k, v in sorted(rewards.items())
        ],
        names.METRIC_ROLLOUT_IN_FLIGHT: [
            {"attributes": {names.DISPATCH_NAME: k}, "value": _peak(v)}
            for k, v in sorted(windows.items())
        ],
        names.METRIC_HTTP_CLIENT_QUEUE_DURATION: [
            _histogram({destination_key: k}, v) for k, v in sorted(queue.items())
        ],
        names.METRIC_HTTP_CLIENT_CONNECTIONS: [
            {"attributes": {destination_key: k}, "value": _peak(v)}
            for k, v in sorted(requests.items())
        ],
        names.METRIC_SANDBOX_EXEC_DURATION: [_histogram({}, execs)] if execs else [],
    }


def _rollouts(
    conn: apsw.Connection,
) -> list[tuple[str, str, float | None, int, int]]:
    """(dispatch name, last outcome, last reward, first start, last end) of each rollout."""
    by_rollout: dict[str, list[Any]] = {}
    for rollout_id, attempt, name, outcome, reward, start, duration in conn.execute(
        "SELECT rollout_id, attempt, dispatch_name, outcome, reward, start_ns, duration_ns "
        "FROM dispatches WHERE rollout_id IS NOT NULL ORDER BY attempt, start_ns"
    ):
        rollout_id = base_rollout_id(rollout_id, attempt)
        entry = by_rollout.get(rollout_id)
        end = start + duration
        if entry is None:
            by_rollout[rollout_id] = [name or "unknown", outcome, reward, start, end]
        else:
            entry[1], entry[2] = outcome, reward
            entry[3], entry[4] = min(entry[3], start), max(entry[4], end)
    return [(e[0], e[1] or "unknown", e[2], e[3], e[4]) for e in by_rollout.values()]
