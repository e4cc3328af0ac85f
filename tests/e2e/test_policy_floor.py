"""A policy version set before a dispatch is the floor of its model calls, under load.

Real servers (the simulated model, both environments, the single-turn and tool-loop agents, an
agent on the OpenAI SDK's streaming client, and episodes the keychain environment plays
itself) launched by the real launcher; the Collector in this process is the trainer. Hundreds
of rollouts are in flight while it sets versions with ``collector.policy_version = v``, whose
push to the model server goes in the background and may arrive seconds late. The rows are
handed over one at a time by an async generator, so the test knows the version current when
each row was taken: its rollout is dispatched after that, so none of its model calls may be
stamped older, and none unstamped.

Without a push at all (no ``model_servers``) the model server hears of a version only from
the calls' floors: the rollouts are still all stamped, which fails outright where the floor
does not travel.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import pythonpath
from telemetry_helpers import launched_servers, quick_rows

from rollgym import Collector, RolloutResult
from server_specs import quickstart_servers, simulated_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROWS = 900
IN_FLIGHT = 300
BUMP_EVERY = 60


def _servers() -> dict[str, Any]:
    servers = quickstart_servers(model=simulated_model(latency_s=0.2), episodes=True)
    servers["sdk"] = {
        "kind": "agent",
        "impl": "sdk_agents:StreamingToolAgent",
        "model": "policy",
        "environment": "keys",
    }
    return servers


def _rows() -> list[dict[str, Any]]:
    """Single-turn, tool-loop, SDK and episode rows, cycled to :data:`ROWS`."""
    kinds = quick_rows(10, 10, 10)
    sdk = [{**row, "agent": "sdk"} for row in quick_rows(0, 10, 0)]
    return list(itertools.islice(itertools.cycle(kinds + sdk), ROWS))


@pytest.mark.parametrize("push", [True, False], ids=["with-push", "floor-only"])
async def test_no_model_call_is_stamped_older_than_its_dispatch(
    tmp_path: Path, push: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", pythonpath())  # the servers import sdk_agents from here
    rows = _rows()
    taken_at: dict[int, int] = {}
    async with launched_servers(_servers(), tmp_path, traces_to=None) as urls:
        servers = {name: urls[name] for name in ("solver", "walker", "sdk", "arith", "keys")}
        collector = Collector(
            servers,
            agents=("solver", "walker", "sdk"),
            environment_routes={"keychain_episodes": "keys"},
            model_servers={"policy": urls["policy"]} if push else None,
            concurrency=IN_FLIGHT,
            timeout_s=120,
            retry_backoff_s=0.01,
        )

        async def trainer_rows() -> AsyncIterator[dict[str, Any]]:
            """Each row as a worker takes it; a new version (set, not awaited) every
            :data:`BUMP_EVERY` rows, the first right before the first dispatch."""
            for index, row in enumerate(rows):
                if index % BUMP_EVERY == 0:
                    collector.policy_version = index // BUMP_EVERY + 1
                    await asyncio.sleep(0)
                current = collector.policy_version
                assert isinstance(current, int)
                taken_at[index] = current
                yield row

        async with collector:
            outcomes = [o async for o in collector.stream(trainer_rows())]
            peak = collector.policy_version
    results = [o for o in outcomes if isinstance(o, RolloutResult)]
    assert len(outcomes) == ROWS and len(results) == ROWS, [
        o for o in outcomes if not isinstance(o, RolloutResult)
    ][:3]
    unstamped = [r.rollout_id for r in results if not r.policy_versions]
    assert not unstamped, f"{len(unstamped)} results carry no version, e.g. {unstamped[:5]}"
    older = [
        (r.rollout_id, taken_at[r.task_index], r.policy_versions)
        for r in results
        if min(r.policy_versions or [0]) < taken_at[r.task_index]
    ]
    assert not older, f"{len(older)} results stamped older than their dispatch: {older[:5]}"
    assert peak == ROWS // BUMP_EVERY  # every version was set, the last one while in flight
    seen = {v for r in results for v in r.policy_versions or []}
    assert len(seen) >= ROWS // BUMP_EVERY - 1  # the bumps landed while rollouts ran
    by_agent = {r.dispatch_name for r in results}
    assert by_agent >= {"solver", "walker", "sdk", "keys"}
