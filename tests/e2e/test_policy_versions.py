"""Policy versions with real servers: stamping across bumps, bounded staleness, whole groups.

The driver side (the :class:`~rollgym.Collector`) runs in this test process; the simulated
model, the keychain environment and the agents are real processes launched by the real
launcher. The simulated model plays the trainer where a test needs a bump at an exact model
call (``bump_every`` / ``bump_at``: its version moves on as requests arrive); elsewhere the
test is the trainer and sets ``collector.policy_version``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from telemetry_helpers import from_sdk, launched_servers, quick_rows, read_store, trace_store

from rollgym import Collector, RolloutFailure, RolloutResult
from rollgym.telemetry import names
from rollgym.telemetry.groups import configure_gate
from rollgym.telemetry.setup import install_for_tests
from server_specs import quickstart_servers, simulated_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _servers(**model: Any) -> dict[str, Any]:
    """The quickstart's servers, the model given ``model``'s options (its version keys)."""
    return quickstart_servers(model=simulated_model(**model), episodes=False)


def _collector(urls: dict[str, str], **kwargs: Any) -> Collector:
    return Collector(
        {name: urls[name] for name in ("solver", "walker", "arith", "keys")},
        agent="solver",
        agents=("solver", "walker"),
        model_servers={"policy": urls["policy"]},
        timeout_s=60,
        retry_backoff_s=0.01,
        **kwargs,
    )


def _turn_versions(result: RolloutResult) -> list[Any]:
    assert result.trajectory is not None
    return [t["policy_version"] for t in result.trajectory["turns"] if t["type"] == "model"]


async def test_a_bump_between_model_calls_is_stamped_on_each_call(tmp_path: Path) -> None:
    """The engine moves its version on at every request: a rollout's calls each carry the
    version current when it was sent, in call order, on the record and on the turns; with
    ``max_staleness`` such a rollout is run again and, attempts spent, a ``stale`` failure."""
    walks = quick_rows(0, 3, 0)
    async with launched_servers(_servers(bump_every=1), tmp_path, traces_to=None) as urls:
        async with _collector(urls, concurrency=1, trajectories=True) as collector:
            results = [o async for o in collector.stream(walks)]
        async with _collector(urls, concurrency=1, max_staleness=0, max_attempts=2) as bounded:
            bounded_outcomes = [o async for o in bounded.stream(walks)]
            groups = [g async for g in bounded.groups(quick_rows(2, 1, 0), size=2)]
    assert all(isinstance(o, RolloutResult) for o in results)
    seen: list[Any] = []
    multi = 0
    for result in results:
        assert isinstance(result, RolloutResult)
        versions = result.policy_versions
        assert versions is not None and result.usage is not None
        assert len(versions) == result.usage["model_calls"] == len(_turn_versions(result))
        assert versions == _turn_versions(result)
        assert versions == list(range(versions[0], versions[0] + len(versions)))
        assert result.policy_lag == len(versions) - 1  # current is the newest the engine reported
        multi += len(versions) > 1
        seen += versions
        assert result.to_record()["policy_versions"] == versions
    assert multi >= 2 and seen == sorted(seen) and len(set(seen)) == len(seen)
    # bounded: a multi-call rollout can never be fresh here; a retry is a new attempt
    for outcome in bounded_outcomes:
        if isinstance(outcome, RolloutFailure):
            assert outcome.error_kind == "stale" and outcome.attempt == 1
            assert outcome.rollout_id.endswith("-a1")
        else:
            assert outcome.policy_lag == 0 and outcome.policy_versions is not None
            assert len(outcome.policy_versions) == 1
    assert sum(isinstance(o, RolloutFailure) for o in bounded_outcomes) >= 2
    # groups: each task's 2 repeats together; the walker's group holds its stale failures
    assert sorted(len(g) for g in groups) == [2, 2, 2]
    for group in groups:
        assert len({o.task_index for o in group}) == 1
        assert [o.rollout_index for o in group] == [0, 1]
    walker = [g for g in groups if g[0].dispatch_name == "walker"]
    assert len(walker) == 1 and any(isinstance(o, RolloutFailure) for o in walker[0])
    solver = [g for g in groups if g[0].dispatch_name == "solver"]
    assert all(isinstance(o, RolloutResult) for g in solver for o in g)


async def test_a_stale_rollout_is_rerun_fresh_and_spans_carry_versions(tmp_path: Path) -> None:
    """One bump at the second request: the first attempt straddles it (stale at bound 0), the
    second runs wholly on the new version and is handed over. Then the test is the trainer:
    its versions reach the model server and every record, span and group."""
    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    try:
        async with (
            trace_store(tmp_path) as store,
            launched_servers(_servers(bump_at=[1]), tmp_path, traces_to=store.endpoint) as urls,
        ):
            async with _collector(urls, concurrency=1, max_staleness=0) as collector:
                rerun = [o async for o in collector.stream(quick_rows(0, 1, 0))]
                await collector.set_policy_version(10)
                answer = await collector.client.get_json(
                    "policy", urls["policy"] + "/policy_version"
                )
                stepped: list[Outcome] = []
                async for outcome in collector.stream(quick_rows(3, 0, 0)):
                    stepped.append(outcome)
                    await collector.set_policy_version(collector.policy_version + 1)  # type: ignore[operator]
            async with _collector(urls, concurrency=2, repeats=2, policy_version=20) as trainer:
                rows = quick_rows(2, 0, 0)
                first: list[list[Outcome]] = []
                async for group in trainer.groups(rows):
                    first.append(group)
                    break  # the trainer stops after one group (as a crash would)
                await trainer.set_policy_version(21)
                resumed = [g async for g in trainer.groups(rows, finished=first[0])]
    finally:
        configure_gate((), tracing_active=False)
    [result] = rerun
    assert isinstance(result, RolloutResult)
    assert result.attempt == 1 and result.rollout_id == "0-0-a1"
    assert result.policy_versions is not None and set(result.policy_versions) == {1}
    assert answer.data == {"version": 10}
    assert [o.policy_versions for o in stepped] == [[10], [11], [12]]
    # resume: the finished group comes out first, untouched, and is not run again
    assert resumed[0] == first[0] and len(resumed) == 2
    assert {o.task_index for o in resumed[1]} == {1 - first[0][0].task_index}
    assert all(o.policy_versions == [21] for o in resumed[1])  # run after the resume
    # spans: each model call and each dispatch carries its versions
    stored = read_store(tmp_path / "traces.db")
    chats = [s for s in stored if s.name == names.SPAN_MODEL_CHAT]
    # the version comes with the model's answer: a call cancelled with its rollout (the
    # trainer's break ends the other group's rollouts) has none, and says it was cancelled
    answered = [s for s in chats if names.ERROR_TYPE not in s.attributes]
    assert answered and all(names.POLICY_VERSION in s.attributes for s in answered)
    unanswered = [s for s in chats if names.POLICY_VERSION not in s.attributes]
    assert all(s.attributes[names.ERROR_TYPE] == "CancelledError" for s in unanswered)
    assert {s.attributes[names.POLICY_VERSION] for s in answered} >= {0, 1, 10, 11, 12}
    dispatches = [
        s for s in from_sdk(exporter.get_finished_spans()) if s.name == names.SPAN_DISPATCH
    ]
    by_id: dict[Any, Any] = {}
    for span in dispatches:  # the first stream's: later streams reuse the ids
        by_id.setdefault(span.rollout_id, span.attributes)
    assert (
        by_id["0-0"][names.POLICY_VERSION_MIN] == 0 and by_id["0-0"][names.POLICY_VERSION_MAX] == 1
    )
    assert by_id["0-0-a1"][names.POLICY_VERSION_MIN] == 1


Outcome = RolloutResult | RolloutFailure
