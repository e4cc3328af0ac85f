"""Accounting, pass@k and ``summary.json``.

Every record (this session's through :meth:`Aggregator.add_result` / ``add_failure`` and, on
resume, the earlier sessions' read by the ledger through ``add_record``) is counted by the one
:class:`Aggregator`, so ``requested == completed + failed`` holds by construction:
a rollout the run reached is counted exactly once, as a result or as a failure. Per-task counts
for pass@k live in compact ``array`` columns indexed by task index, so a 300,000-row input
costs a few MB, not a dict of tuples.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollgym.driver.group_spread import GroupSpread
from rollgym.files import write_atomically
from rollgym.records import fields_record
from rollgym.telemetry.span_counts import empty_record

#: The failure kind of a rollout an interruption (Ctrl-C, SIGTERM) cancelled: not a failure
#: of the rollout, so the end table shows it apart and pass@k never counts it.
CANCELLED = "cancelled"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: ``1 - C(n-c, k) / C(n, k)`` (numerically stable form)."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


#: Up to this many repeats, pass@k is reported for every k; beyond, at the k of
#: :func:`reported_ks` (each pass@k reads every task, so every k of 1,000 repeats would cost
#: 1,000 passes over the tasks and 1,000 numbers nobody reads).
EVERY_K_UP_TO = 16


def reported_ks(repeats: int) -> list[int]:
    """The k that pass@k is reported at for ``repeats`` rollouts a task: every k up to
    :data:`EVERY_K_UP_TO`, then 1, 2, 4, 8, ... and ``repeats`` itself (pass@k is concave in
    k, so doubling steps draw its curve)."""
    if repeats <= EVERY_K_UP_TO:
        return list(range(1, repeats + 1))
    ks = [1 << power for power in range(repeats.bit_length()) if 1 << power < repeats]
    return [*ks, repeats]


def _grow(column: array[int], index: int) -> None:
    """Make ``column[index]`` exist; grow by half so slack stays small on huge inputs."""
    if index >= len(column):
        column.frombytes(
            bytes(column.itemsize * max(index + 1 - len(column), len(column) // 2, 1024))
        )


class DispatchStats:
    """Counts of one dispatch name; per-task ``n`` (completed) and ``c`` (passed) columns."""

    __slots__ = ("completed", "failed", "cancelled", "reward_sum", "n", "c", "usage")

    def __init__(self, repeats: int = 1) -> None:
        self.completed = 0
        self.failed = 0
        #: Of ``failed``: rollouts an interruption cancelled (not run to an end, not failed).
        self.cancelled = 0
        self.reward_sum = 0.0
        # counts per task never exceed repeats: 2 bytes per task when they fit
        typecode = "H" if repeats < 2**16 else "I"
        self.n = array(typecode)
        self.c = array(typecode)
        #: Sums of the completed rollouts' ``usage`` (rollouts.jsonl); empty when none had one.
        self.usage: dict[str, int | float] = {}

    def add_usage(self, usage: Mapping[str, object] | None) -> None:
        """Add one rollout's usage: every numeric field summed under its own name."""
        if not isinstance(usage, Mapping):
            return
        totals = self.usage
        for key, value in usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value

    def add_result(self, task_index: int, reward: float, passed: bool) -> None:
        self.completed += 1
        self.reward_sum += reward
        _grow(self.n, task_index)
        _grow(self.c, task_index)
        self.n[task_index] += 1
        if passed:
            self.c[task_index] += 1

    def pass_at(self, k: int) -> float | None:
        """Mean pass@k over tasks with at least k completed rollouts; None when there are none."""
        total, tasks = 0.0, 0
        for n, c in zip(self.n, self.c, strict=True):
            if n >= k:
                total += pass_at_k(n, c, k)
                tasks += 1
        return total / tasks if tasks else None

    def to_json(self, repeats: int) -> dict[str, Any]:
        mean = self.reward_sum / self.completed if self.completed else None
        return {
            "completed": self.completed,
            "failed": self.failed,
            **({"cancelled": self.cancelled} if self.cancelled else {}),
            "mean_reward": mean,
            "pass_at_k": {str(k): self.pass_at(k) for k in reported_ks(repeats)},
            **({"usage": _rounded(self.usage)} if self.usage else {}),
        }


def _lag(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rounded(usage: dict[str, int | float]) -> dict[str, int | float]:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in sorted(usage.items())}


class Aggregator:
    """Counts every record once; answers the live counts progress shows."""

    def __init__(self, repeats: int, pass_threshold: float) -> None:
        self.repeats = repeats
        self.pass_threshold = pass_threshold
        self.completed = 0
        self.failed = 0
        self.failed_by_kind: Counter[str] = Counter()
        self.by_name: dict[str, DispatchStats] = {}
        #: Results per policy lag (versions behind when they came back), where versions were known.
        self.policy_lag: Counter[int] = Counter()
        #: Model calls answered incompletely in the results kept (``usage.incomplete_calls``),
        #: and how many results had one.
        self.incomplete_calls = 0
        self.incomplete_results = 0
        #: Reward spread per group (a task's repeats): ``summary.json``'s ``groups``.
        self.groups = GroupSpread(repeats)
        #: Input lines that could not be read: one failure each (see :meth:`expected_total`).
        self.unreadable_lines = 0

    @property
    def requested(self) -> int:
        return self.completed + self.failed

    def _stats(self, name: str) -> DispatchStats:
        stats = self.by_name.get(name)
        if stats is None:
            stats = self.by_name[name] = DispatchStats(self.repeats)
        return stats

    def add_result(
        self,
        name: str,
        task_index: int,
        reward: float,
        usage: Mapping[str, object] | None = None,
        policy_lag: int | None = None,
    ) -> None:
        self.completed += 1
        stats = self._stats(name)
        stats.add_result(task_index, reward, reward >= self.pass_threshold)
        stats.add_usage(usage)
        calls = usage.get("incomplete_calls") if isinstance(usage, Mapping) else None
        if isinstance(calls, int) and not isinstance(calls, bool) and calls > 0:
            self.incomplete_calls += calls
            self.incomplete_results += 1
        self.groups.add(task_index, reward)
        if policy_lag is not None:
            self.policy_lag[policy_lag] += 1

    def staleness(self) -> dict[str, Any]:
        """``summary.json``'s ``staleness``: results per lag, and the ``stale`` failures;
        empty when no result carried policy versions."""
        if not self.policy_lag and not self.failed_by_kind.get("stale"):
            return {}
        lags = self.policy_lag
        return {
            "results_by_lag": {str(lag): lags[lag] for lag in sorted(lags)},
            "max_lag": max(lags) if lags else None,
            "stale_failures": self.failed_by_kind.get("stale", 0),
        }

    def incomplete(self) -> dict[str, int]:
        """``summary.json``'s ``incomplete_model_calls``: model answers that were not whole
        (a cut stream, no finish reason), in the results kept (``run.incomplete_model_calls:
        accept``) and as failures (``retry``, every attempt spent); empty when there were none."""
        failed = self.failed_by_kind.get("incomplete_model_call", 0)
        if not self.incomplete_calls and not failed:
            return {}
        return {
            "calls_in_results": self.incomplete_calls,
            "results": self.incomplete_results,
            "failed_rollouts": failed,
        }

    def add_failure(self, name: str | None, error_kind: str, whole_line: bool = False) -> None:
        """``whole_line``: the failure of an input line that could not be read (one record
        for the line, where a readable one makes ``repeats``)."""
        self.failed += 1
        self.failed_by_kind[error_kind] += 1
        self.unreadable_lines += whole_line
        if name is not None:
            stats = self._stats(name)
            stats.failed += 1
            stats.cancelled += error_kind == CANCELLED

    def expected_total(self, total: int | None) -> int | None:
        """How many records the run will have, from ``total`` (input lines x repeats): an
        unreadable line is one record, not ``repeats``, so each seen takes ``repeats - 1`` off."""
        if total is None:
            return None
        return total - self.unreadable_lines * (self.repeats - 1)

    def add_record(self, record: dict[str, Any], is_result: bool) -> None:
        """Feed one stored record (the resume ledger's callback)."""
        if is_result:
            self.add_result(
                str(record.get("dispatch_name")),
                int(record["task_index"]),
                float(record["reward"]),
                record.get("usage"),
                _lag(record.get("policy_lag")),
            )
        else:
            self.add_failure(
                record.get("dispatch_name"),
                str(record.get("error_kind")),
                whole_line="rollout_index" in record and record["rollout_index"] is None,
            )

    def by_dispatch_name(self) -> dict[str, object]:
        return {name: stats.to_json(self.repeats) for name, stats in sorted(self.by_name.items())}


@dataclass
class Summary:
    """The content of ``summary.json``; ``run_job`` returns it."""

    run_id: str
    status: str
    requested: int
    completed: int
    failed: int
    failed_by_kind: dict[str, int]
    by_dispatch_name: dict[str, Any]
    environments: dict[str, Any] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=lambda: dict(empty_record()))
    duration_s: float = 0.0
    #: Records per second of this session; None when it recorded none (nothing left to run).
    rollouts_per_s: float | None = 0.0
    output_dir: str | None = None
    #: Per launched server: deaths, restarts, whether it ended the run down.
    servers: dict[str, Any] = field(default_factory=dict)
    #: Things the person running the job must see (a server gone, spans dropped).
    warnings: list[str] = field(default_factory=list)
    #: Policy lag of the results (:meth:`Aggregator.staleness`); empty without versions.
    staleness: dict[str, Any] = field(default_factory=dict)
    #: Model answers that were not whole (:meth:`Aggregator.incomplete`); empty without any.
    incomplete_model_calls: dict[str, int] = field(default_factory=dict)
    #: Reward spread of the groups (:meth:`GroupSpread.summary`); empty when repeats is 1.
    groups: dict[str, Any] = field(default_factory=dict)
    #: The weight probes' gaps per version (:meth:`ProbeLog.summary`); empty without probes.
    probes: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_aggregator(
        cls, run_id: str, status: str, aggregator: Aggregator, duration_s: float, session_count: int
    ) -> Summary:
        """``session_count``: records of this session only, for the rate."""
        # A session that ran nothing (a resume of a finished run) has no rate, not 0/s.
        rate = session_count / duration_s if session_count and duration_s > 0 else None
        return cls(
            run_id=run_id,
            status=status,
            requested=aggregator.requested,
            completed=aggregator.completed,
            failed=aggregator.failed,
            failed_by_kind=dict(sorted(aggregator.failed_by_kind.items())),
            by_dispatch_name=aggregator.by_dispatch_name(),
            duration_s=round(duration_s, 3),
            rollouts_per_s=round(rate, 3) if rate is not None else None,
            staleness=aggregator.staleness(),
            incomplete_model_calls=aggregator.incomplete(),
            groups=dict(aggregator.groups.summary()) if aggregator.repeats > 1 else {},
        )

    def to_json(self) -> dict[str, Any]:
        """``summary.json``: every field in order but ``output_dir`` (the file sits in it),
        then the sections a run may not have, each only when it has something to say."""
        record = fields_record(self, leave_out=_NOT_ALWAYS_WRITTEN)
        for name in _WRITTEN_WHEN_SET:
            value = getattr(self, name)
            if value:
                record[name] = value
        return record


#: ``summary.json``'s sections written only when not empty, in the order they are written.
_WRITTEN_WHEN_SET = ("staleness", "probes", "incomplete_model_calls", "groups")
_NOT_ALWAYS_WRITTEN = frozenset({"output_dir", *_WRITTEN_WHEN_SET})


#: Aggregates that are means over ``count``: merged across replicas weighted by each one's count.
_MEANS_OVER_COUNT = frozenset({"mean_reward", "pass_rate"})


def merge_replicas(per_replica: Mapping[str, object]) -> dict[str, object]:
    """One server's figures from its replicas' (``{instance: figures}``), each still listed.

    Counts (integers) add up, nested tables merge key by key, ``mean_reward`` and
    ``pass_rate`` are weighted by each replica's ``count``; any other value is kept when every
    replica reports the same and left out otherwise (it is still under ``replicas``). A
    replica that answered with an error is left out of the sum (its error stays listed).
    """
    answered = [
        figures
        for figures in per_replica.values()
        if isinstance(figures, dict) and "error" not in figures
    ]
    merged: dict[str, object] = _merge(answered) if answered else {"error": "no replica answered"}
    merged["replicas"] = dict(per_replica)
    return merged


def _merge(tables: list[dict[str, Any]]) -> dict[str, object]:
    merged: dict[str, object] = {}
    keys = dict.fromkeys(key for table in tables for key in table)
    for key in keys:
        values = [table[key] for table in tables if key in table]
        if all(_is_count(value) for value in values):
            merged[key] = sum(values)
        elif all(isinstance(value, dict) for value in values):
            merged[key] = _merge(values)
        elif key in _MEANS_OVER_COUNT:
            merged[key] = _weighted_mean(tables, key)
        elif all(value == values[0] for value in values):
            merged[key] = values[0]
    return merged


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _weighted_mean(tables: Sequence[Mapping[str, object]], key: str) -> float | None:
    """The mean of ``key`` over all replicas' samples (each replica's weighs its ``count``)."""
    total, weight = 0.0, 0
    for table in tables:
        value, count = table.get(key), table.get("count")
        if isinstance(value, int | float) and isinstance(count, int) and count > 0:
            total += float(value) * count
            weight += count
    return total / weight if weight else None


def write_json_atomic(path: Path, data: object) -> None:
    """Write a JSON file so a reader never sees half of it (:func:`write_atomically`)."""
    write_atomically(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
