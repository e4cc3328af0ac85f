"""Policy versions in the driver: lag, the staleness bound and its re-runs, whole groups."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aiohttp_loopback import serve_on_loopback
from rollgym.driver.dispatch import AttemptOutcome
from rollgym.driver.groups import GroupBuffer
from rollgym.driver.outcomes import Outcome, RolloutFailure, RolloutResult
from rollgym.driver.policy_clock import PolicyClock
from rollgym.driver.retry import InFlight, RetryPolicy, run_rollout
from rollgym.driver.rows import Rollout, Target, TaskRow
from rollgym.driver.summary import Aggregator, Summary
from rollgym.driver.version_file import follow_version_file, read_version
from rollgym.policy_versions import (
    FLOOR_HEADER,
    VersionOrder,
    parse_floor,
    parse_version,
    supersedes,
    version_range,
)
from waits import until


def test_lag_of_ints_and_labels() -> None:
    order = VersionOrder()
    assert order.lag(5, [5, 5]) == 0
    assert order.lag(5, [3, 4, 5]) == 2
    assert order.lag(5, []) is None
    for label in ("a", "b", "c"):
        order.note(label)
    assert order.lag("c", ["a", "c"]) == 2
    assert order.lag("c", ["never-set"]) is None
    assert parse_version(" 7\n") == 7 and parse_version("step-7") == "step-7"
    assert version_range([3, 1, 2]) == (1, 3)
    assert version_range(["b", "a"]) == ("b", "a")


def test_clock_follows_newer_int_versions_and_judges_the_bound() -> None:
    clock = PolicyClock(2, max_staleness=1)
    assert clock.lag([2]) == 0
    assert clock.lag([1, 2]) == 1 and not clock.too_stale(1)
    assert clock.lag([4]) == 0 and clock.current == 4  # the engine is ahead: it is current
    assert clock.lag([2, 4]) == 2 and clock.too_stale(2)
    assert not PolicyClock(0).too_stale(100)  # no bound: never stale
    with pytest.raises(ValueError):
        PolicyClock(max_staleness=-1)


def _rollout(task_index: int = 0, rollout_index: int = 0) -> Rollout:
    task = TaskRow(task_index, task_index + 1, {}, None, Target("solver", "solver", False))
    return Rollout(task, rollout_index)


def _answer(rollout: Rollout, attempt: int, versions: list[Any]) -> AttemptOutcome:
    result = {"reward": 1.0, "rollgym_usage": {"model_calls": len(versions)}}
    result["rollgym_usage"]["policy_versions"] = versions
    return AttemptOutcome(rollout.rollout_id(attempt), attempt, 1.0, result, None, None, 0.0, 0.1)


def _run(versions_by_attempt: list[list[Any]], clock: PolicyClock, attempts: int) -> Outcome:
    rollout = _rollout()
    sent: list[int] = []

    async def send(item: Rollout, attempt: int) -> AttemptOutcome:
        sent.append(attempt)
        return _answer(item, attempt, versions_by_attempt[attempt])

    policy = RetryPolicy(attempts, 0.0, 0.0)
    outcome = asyncio.run(
        run_rollout(rollout, send, policy, InFlight(), lambda _: None, None, clock)
    )
    assert sent == list(range(len(sent)))
    return outcome


def test_a_stale_result_is_run_again_and_the_fresh_one_handed_over() -> None:
    clock = PolicyClock(3, max_staleness=0)
    outcome = _run([[2, 3], [3, 3]], clock, attempts=3)
    assert isinstance(outcome, RolloutResult)
    assert outcome.attempt == 1 and outcome.rollout_id == "0-0-a1"
    assert outcome.policy_versions == [3, 3] and outcome.policy_lag == 0
    assert outcome.usage == {"model_calls": 2}  # the versions moved out of the usage
    assert outcome.to_record()["policy_versions"] == [3, 3]


def test_stale_on_every_attempt_is_a_stale_failure_not_a_reward() -> None:
    clock = PolicyClock(5, max_staleness=1)
    outcome = _run([[1, 5], [2, 5]], clock, attempts=2)
    assert isinstance(outcome, RolloutFailure)
    assert outcome.error_kind == "stale" and outcome.attempt == 1
    assert "max_staleness 1" in outcome.message and "[2, 5]" in outcome.message
    assert "reward" not in outcome.to_record()


def test_without_a_bound_lag_is_recorded_and_nothing_is_rerun() -> None:
    outcome = _run([[0, 9]], PolicyClock(9), attempts=3)
    assert isinstance(outcome, RolloutResult) and outcome.attempt == 0
    assert outcome.policy_lag == 9


def _result(task: int, index: int) -> RolloutResult:
    return RolloutResult(f"{task}-{index}", task, index, 0, "solver", 1.0, 0.1, None, 0, 0, {})


def _failure(task: int, index: int | None, kind: str = "stale") -> RolloutFailure:
    return RolloutFailure(f"{task}-{index}", task, index, 0, "solver", kind, "m")


def test_groups_come_out_whole_with_their_failures() -> None:
    buffer = GroupBuffer(3)
    assert buffer.add(_result(0, 2)) is None
    assert buffer.add(_result(1, 0)) is None
    assert buffer.add(_failure(0, 0)) is None
    group = buffer.add(_result(0, 1))
    assert group is not None
    assert [(o.rollout_index, type(o).__name__) for o in group] == [
        (0, "RolloutFailure"),
        (1, "RolloutResult"),
        (2, "RolloutResult"),
    ]
    assert buffer.add(_failure(7, None, "invalid_row")) == [_failure(7, None, "invalid_row")]
    assert [[o.rollout_id for o in g] for g in buffer.leftovers()] == [["1-0"]]


def test_groups_resume_from_earlier_outcomes() -> None:
    earlier = [_result(0, 0), _result(0, 1), _result(1, 0), _failure(1, 1, "cancelled")]
    buffer = GroupBuffer(2, earlier)
    assert [[o.rollout_id for o in g] for g in buffer.whole_at_start()] == [["0-0", "0-1"]]
    assert buffer.skip(1, 0) and not buffer.skip(1, 1)  # a cancelled one runs again
    group = buffer.add(_result(1, 1))
    assert group is not None and [o.rollout_id for o in group] == ["1-0", "1-1"]


def test_summary_reports_the_lag_distribution_and_stale_failures() -> None:
    aggregator = Aggregator(1, 1.0)
    for lag in (0, 0, 1, 2):
        aggregator.add_result("solver", 0, 1.0, None, lag)
    aggregator.add_failure("solver", "stale")
    aggregator.add_record(
        {"dispatch_name": "solver", "task_index": 1, "reward": 0.0, "policy_lag": 1}, True
    )
    summary = Summary.from_aggregator("r", "completed", aggregator, 1.0, 6).to_json()
    assert summary["staleness"] == {
        "results_by_lag": {"0": 2, "1": 2, "2": 1},
        "max_lag": 2,
        "stale_failures": 1,
    }
    assert "staleness" not in Summary.from_aggregator("r", "ok", Aggregator(1, 1.0), 1, 0).to_json()


class _Target:
    def __init__(self) -> None:
        self.versions: list[Any] = []

    async def set_policy_version(self, version: Any) -> None:
        self.versions.append(version)


def test_version_file_is_read_at_start_and_on_change(tmp_path: Path) -> None:
    path = tmp_path / "version"
    path.write_text("3\n")
    target = _Target()

    async def main() -> None:
        async with follow_version_file(target, path):
            assert target.versions == [3]
            tmp = tmp_path / "version.tmp"
            tmp.write_text("step-4")
            tmp.replace(path)  # the trainer's atomic rewrite
            await until(lambda: len(target.versions) == 2, "the rewritten version to be read")

    asyncio.run(main())
    assert target.versions == [3, "step-4"]
    path.write_text("")
    assert read_version(path) is None and read_version(tmp_path / "missing") is None


class _VersionSink:
    """A loopback model server's ``/policy_version`` route: records each version it is told."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.versions: list[Any] = []
        self.url = ""
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            body = await request.json()
            self.versions.append(body["version"])
            return web.json_response(body, status=self.status)

        app = web.Application()
        app.router.add_post("/policy_version", handle)
        self._runner, port = await serve_on_loopback(app)
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        await self._runner.cleanup()


def test_the_collector_tells_every_model_replica_and_skips_a_server_without_the_route() -> None:
    from rollgym import Collector

    async def main() -> tuple[list[Any], list[Any], list[Any], Any]:
        first, second, engine = _VersionSink(), _VersionSink(), _VersionSink(status=404)
        for sink in (first, second, engine):
            await sink.start()
        try:
            collector = Collector(
                {"agent": "http://127.0.0.1:9"},
                agent="agent",
                model_servers={"policy": first.url, "engine": engine.url},
                replicas={"policy": [first.url, second.url]},
                policy_version=1,
            )
            async with collector:
                await collector.set_policy_version("step-2")  # the engine's 404 does not raise
                collector.policy_version = 3  # sent in the background ...
            # ... and delivered before the Collector closed
            return first.versions, second.versions, engine.versions, collector.policy_version
        finally:
            for sink in (first, second, engine):
                await sink.stop()

    first, second, engine, current = asyncio.run(main())
    assert first == second == [1, "step-2", 3]
    assert engine == [1]  # told once, then left out
    assert current == 3


def test_each_set_gives_dispatches_a_newer_floor() -> None:
    """The header a dispatch carries: the version set last and when, later for each set."""
    clock = PolicyClock()
    assert clock.floor_headers is None  # nothing set: a dispatch carries no floor
    clock.set(5)
    first, first_ns = clock.floor_headers, clock.set_ns
    assert first is not None and parse_floor(first[FLOOR_HEADER]) == (5, first_ns)
    clock.set(5)
    assert clock.set_ns > first_ns  # set again: a later floor, even within one clock tick
    clock.set("step-6")
    assert clock.floor_headers is not None
    assert parse_floor(clock.floor_headers[FLOOR_HEADER]) == ("step-6", clock.set_ns)
    assert parse_floor("[1, 2]") is None and parse_floor('{"version": true, "set_ns": 1}') is None


def test_the_version_set_later_wins() -> None:
    assert supersedes(1, 10, None, 0)  # nothing held
    assert supersedes(0, 20, 9, 10)  # set later: wins even when smaller (a new run)
    assert not supersedes(9, 5, 3, 10)  # set earlier (a late push): loses even when larger
    assert supersedes(4, 10, 3, 10)  # same set time (the engine bumped): the larger int
    assert not supersedes("b", 10, "a", 10)
