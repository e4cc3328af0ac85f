"""The agent server base: ``POST /run`` performs one rollout and answers its reward.

Writing an agent is one method, ``async def run(self, row, rollout) -> dict``. The base does
everything around it once: it checks the body is a JSON object, derives the rollout id from the
collector row (the same derivation as the driver's), opens ``gym.rollout`` (gate.rollout),
translates failures into the right status (400 for a task the environment refused, 502/504
when the model or environment failed, 500 for the agent's own bug) and refuses an answer
without a finite numeric ``reward`` with a clear 500, so the driver never records a guess.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from starlette.responses import Response

import rollgym.server_timing as server_timing
from rollgym.http.plain_routes import add_post
from rollgym.identity import EXPLICIT_ID, STAMPED_FIELDS, rollout_id_of
from rollgym.server_options import ServerKind, ServerOptions
from rollgym.servers.agent_options import AgentOptions
from rollgym.servers.answers import check_reward, guarded, json_object
from rollgym.servers.base import Server
from rollgym.servers.rollout_context import HttpEnvSession, ModelClient, RolloutContext
from rollgym.servers.rollout_span import answer_rollout_route
from rollgym.trajectory.record import attach
from rollgym.trajectory.usage import attach_usage

#: Row keys that are routing or identity, not part of the task the environment sees.
_NOT_TASK = frozenset((*STAMPED_FIELDS, EXPLICIT_ID, "agent", "sampling"))


def task_of(row: Mapping[str, object]) -> dict[str, Any]:
    """The task inside a collector row: the row without the driver's identity and routing keys."""
    return {key: value for key, value in row.items() if key not in _NOT_TASK}


class Agent(Server):
    """Base of every agent server; subclasses implement :meth:`run`.

    When the run asks for trajectories, the base records every call the rollout makes through
    its :class:`RolloutContext` and adds the trajectory to the answer: ``run`` does nothing.
    """

    kind: ClassVar[ServerKind] = "agent"
    Options: ClassVar[type[ServerOptions]] = AgentOptions
    options: AgentOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        """Perform one rollout of ``row``; answer an object with a numeric ``reward``."""
        raise NotImplementedError

    def add_routes(self, app: FastAPI) -> None:
        add_post(app, "/run", self._handle_run)  # a plain Starlette route: no dependency solving

    def rollout_context(
        self,
        rollout_id: str | None,
        row: dict[str, Any] | None = None,
        capture: str | None = None,
        policy_floor: str | None = None,
    ) -> RolloutContext:
        """The model client, environment session, sampling and trajectory recorder of one
        rollout, from this agent's options, the row's ``sampling`` and the driver's capture
        header; ``policy_floor``, the dispatch's ``X-Rollgym-Policy-Floor``, goes on with every
        model call (docs/policy-versions.md)."""
        options = self.options
        row = row or {}
        sampling = options.sampling_for(self.row_sampling(row))
        environment = self.environment_for(row)
        model = env = None
        if options.model is not None:
            model = ModelClient.of_server(
                self.context,
                options.model,
                rollout_id=rollout_id,
                model_name=options.model_name,
                timeout=options.request_timeout_s,
                policy_floor=policy_floor,
            )
        if environment is not None:
            env = HttpEnvSession(
                self.client,
                environment,
                self.context.url_of(environment),
                rollout_id=rollout_id,
                timeout=options.request_timeout_s,
            )
        return RolloutContext(
            rollout_id, model, env, sampling=sampling, trajectory=options.recorder_for(capture)
        )

    def environment_for(self, row: dict[str, Any]) -> str | None:
        """The environment server a row's rollout uses: the ``environment`` option."""
        return self.options.environment

    def row_sampling(self, row: dict[str, Any]) -> Any:
        """The row's own sampling parameters (its ``sampling`` object), if any."""
        return row.get("sampling")

    async def _handle_run(self, request: Request) -> Response:
        row = await json_object(request)
        rollout_id = rollout_id_of(row)
        play = functools.partial(self._run_checked, row, rollout_id)
        return await answer_rollout_route(request, rollout_id, self.context.name, play)

    async def _run_checked(
        self,
        row: dict[str, Any],
        rollout_id: str | None,
        capture: str | None,
        floor: str | None = None,
    ) -> dict[str, object]:
        who = f"agent {self.context.name!r}"
        playing: list[RolloutContext] = []

        def partial() -> dict[str, object] | None:
            """The turns recorded before a failure (None: no trajectory asked)."""
            recorder = playing[0].trajectory if playing else None
            return recorder.to_json() if recorder is not None and recorder.turns else None

        async def attempt() -> dict[str, object]:
            rollout = self.rollout_context(rollout_id, row, capture, floor)
            playing.append(rollout)
            try:
                with server_timing.collecting(rollout.usage.timings):
                    played = await self.run(row, rollout)
                answer = attach(played, rollout.trajectory)
                answered: dict[str, Any] = attach_usage(answer, rollout.usage)
                return answered
            finally:
                await rollout.aclose()

        answer = await guarded(who, attempt(), rollout_id=rollout_id, partial=partial)
        return check_reward(answer, who)
