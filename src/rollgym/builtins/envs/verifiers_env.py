"""``impl: verifiers``: an environment written with verifiers, played by its own rollout loop.

A verifiers environment (``vf.SingleTurnEnv``, ``vf.ToolEnv``, ``vf.MultiTurnEnv`` or any
``vf.Environment``, with its ``vf.Rubric``) owns its rollout: it calls the model through an
OpenAI-compatible client, runs its tools and environment turns, and its rubric scores the
result. So in rollgym it is an episode server: an environment whose ``/run`` plays one row by
having the environment play its own ``rollout``.

verifiers needs packages that clash with rollgym's other extras, so the environment runs in a
worker process of its own Python (:mod:`rollgym.builtins.envs.verifiers_worker`, option
``verifiers_python``), which this server starts, feeds rows and reads events from
(:mod:`rollgym.builtins.envs.verifiers_channel`). Every model call the environment makes comes
back here and goes out through the rollout's :meth:`RolloutContext.async_openai` client, so it
is rollout-attributed, traced (``gym.model.chat``), token-captured and policy-versioned like a
built-in's; each step the worker reports is a span here (``gym.env.seed_session`` for
``setup_state``, ``gym.env.tool`` for a tool call or an ``env_response``, ``gym.verify`` for the
rubric, each reward function and metric an evaluation event) and a turn of the trajectory.

A row names its example: ``example_id`` (or the integer ``task_id`` of a task-set route) picks
a row of the environment's own dataset (its eval dataset, else its train dataset); a row with
a ``prompt`` is a verifiers rollout input itself (``prompt``, ``answer``, ``info``).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import sys
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from opentelemetry.trace import Span
from pydantic import Field, model_validator

from rollgym.builtins.envs.foreign import venv_python
from rollgym.builtins.envs.verifiers_channel import WorkerChannel, start_worker
from rollgym.servers import (
    Environment,
    EnvironmentOptions,
    HTTPError,
    RolloutContext,
    ServerContext,
    ServerOptions,
    SessionState,
    Verdict,
    gate,
    spans,
)

#: A verifiers input's own fields: what a row given inline may carry to the environment.
INPUT_FIELDS = ("prompt", "answer", "info", "task", "example_id")
#: An event of the worker, as json.loads reads it (its fields: verifiers_worker.py's protocol).
WorkerEvent = dict[str, Any]
#: What stands in the trajectory and the spans for a MultiTurnEnv's environment turn.
ENV_RESPONSE = "env_response"
#: The kind a tool call that raised is recorded with (as rollgym.servers.tools names it).
INVALID_ARGUMENTS = "invalid_arguments"


def default_python() -> str:
    """verifiers' own venv where scripts/test.sh made it, else this Python."""
    return venv_python("verifiers", sys.executable)


class VerifiersOptions(EnvironmentOptions):
    """Which verifiers environment to load, with which Python, and how long a rollout may take."""

    verifiers_environment: str = Field(
        description="'module' exposing load_environment(**args), or 'module:object' (an "
        "environment, or a function returning one), importable from the working directory."
    )
    verifiers_args: dict[str, object] = Field(
        default_factory=dict, description="Keyword arguments of load_environment()."
    )
    verifiers_python: str = Field(
        default_factory=default_python,
        description="The Python that has verifiers installed (default: scripts/test.sh's venv "
        "~/.cache/rollgym-verifiers/venv, else this Python).",
    )
    rollout_timeout_s: float = Field(
        600.0, gt=0, description="Time for one whole rollout, scoring included."
    )
    load_timeout_s: float = Field(
        300.0, gt=0, description="Time to start the worker and load the environment."
    )

    @model_validator(mode="after")
    def _needs_a_model(self) -> VerifiersOptions:
        if self.model is None:
            raise ValueError(
                "'model' is required: a verifiers environment plays its own rollouts, "
                "against this model server"
            )
        return self


@dataclass
class Live:
    """One rollout the worker is playing: what its events need from this side."""

    rollout: RolloutContext
    sdk: Any
    #: The rollout's context: model calls and step spans run in it (their parent: gym.rollout).
    context: contextvars.Context
    outcome: asyncio.Future[WorkerEvent]
    #: The steps begun and not yet ended: the end event each span waits for.
    steps: dict[int, tuple[asyncio.Event, WorkerEvent]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class VerifiersEnv(Environment):
    """A verifiers environment's rollouts as rollgym episodes (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = VerifiersOptions
    options: VerifiersOptions
    uses_openai_sdk: ClassVar[bool] = True

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        options = self.options
        self.where = f"verifiers environment {options.verifiers_environment!r}"
        self._worker: WorkerChannel = start_worker(
            options.verifiers_python,
            options.verifiers_environment,
            options.verifiers_args,
            timeout_s=options.load_timeout_s,
            cwd=os.getcwd(),
        )
        self._playing: dict[int, Live] = {}
        self._ids = itertools.count()
        self._reader: asyncio.Task[None] | None = None

    async def on_startup(self) -> None:
        await super().on_startup()
        await self._worker.connect()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
        finally:
            if self._reader is not None:
                self._reader.cancel()
            await self._worker.close()

    # --- the session surface: not this environment's ----------------------------------------------

    async def seed(self, task: dict[str, Any]) -> SessionState:
        raise HTTPError(
            501,
            f"environment {self.context.name!r} ({self.where}) plays its own rollouts: route "
            "rows to it (run.environment_routes), not through an agent",
        )

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        raise HTTPError(501, f"environment {self.context.name!r} has no sessions to verify")

    # --- one episode --------------------------------------------------------------------------------

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """The environment's own rollout in the worker, bounded by ``rollout_timeout_s``;
        every failure an HTTPError of one line naming the step."""
        options = self.options
        if self._reader is None or self._reader.done():  # the worker is gone: fail at once
            raise self._failed(502, "worker", self._worker.why_gone())
        request: dict[str, object] = {
            "op": "rollout",
            "model": options.model_name or options.model,
            "sampling": self._sampling(rollout, task),
        }
        request.update(self._input_of(task))
        key = next(self._ids)
        request["id"] = key
        outcome: asyncio.Future[WorkerEvent] = asyncio.get_running_loop().create_future()
        live = Live(rollout, rollout.async_openai(), contextvars.copy_context(), outcome)
        self._playing[key] = live
        try:
            self._worker.send(request)
            async with asyncio.timeout(options.rollout_timeout_s):
                event = await asyncio.shield(outcome)
        except TimeoutError:
            raise self._failed(
                504, "rollout", f"no end within {options.rollout_timeout_s:g} s"
            ) from None
        finally:
            if not outcome.done():  # timed out or cancelled: the worker stops playing it
                self._worker.send({"op": "cancel", "id": key})
            self._end(key)
        if event["op"] == "failed":
            status, step = int(event.get("status") or 502), str(event.get("step"))
            if status == 400:
                raise HTTPError(
                    400, f"environment {self.context.name!r}: {event.get('message')}", field="task"
                )
            raise self._failed(status, step, str(event.get("message")))
        result: dict[str, Any] = event["result"]
        if rollout.trajectory is not None:
            verdict = {"reward": result["reward"], "details": result["details"]}
            rollout.trajectory.verify(result.get("answer"), verdict)
        self.aggregates.record_verify(float(result["reward"]))
        return result

    def _end(self, key: int) -> None:
        """Forget a rollout: its open step spans end, its model calls are dropped."""
        live = self._playing.pop(key, None)
        if live is None:
            return
        for ended, _ in live.steps.values():
            ended.set()
        for task in live.tasks:
            task.cancel()

    def _input_of(self, task: Mapping[str, object]) -> dict[str, object]:
        """``input`` (a row given inline, with ``prompt``) or ``example`` (the index
        ``example_id`` or the task-set route's integer ``task_id`` names)."""
        if "prompt" in task:
            given = {k: task[k] for k in INPUT_FIELDS if k in task}
            given.setdefault("example_id", 0)
            given.setdefault("answer", "")
            if isinstance(given["prompt"], str):
                given["prompt"] = [{"role": "user", "content": given["prompt"]}]
            return {"input": given}
        value: object = task.get("example_id")
        if value is None:
            task_id = task.get("task_id")
            value = task_id.get("task_id") if isinstance(task_id, dict) else task_id
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HTTPError(
                400,
                f"environment {self.context.name!r}: a row needs 'prompt' (a verifiers input) "
                f"or 'example_id' (an index into the environment's dataset), got {value!r}",
                field="task",
            )
        return {"example": value}

    def _sampling(self, rollout: RolloutContext, task: Mapping[str, object]) -> dict[str, object]:
        """The server's and the row's sampling (``sampling``), then what the trajectory's
        token capture asks of the engine; the environment's own sampling arguments lie
        beneath them (verifiers merges them in its client)."""
        ours = self.options.sampling_for(task.get("sampling"))
        sampling: dict[str, object] = dict(ours)
        if rollout.trajectory is not None:
            sampling.update(rollout.trajectory.request_fields())
        if "top_logprobs" in ours:  # the row's choice wins over capture's 0
            sampling["top_logprobs"] = ours["top_logprobs"]
        return sampling

    def _failed(self, status: int, step: str, detail: str) -> HTTPError:
        return HTTPError(
            status, f"environment {self.context.name!r} ({self.where}): {step}: {detail}"
        )

    # --- the worker's events ----------------------------------------------------------------------

    async def _read(self) -> None:
        """Every event of the worker, in order, until it ends (then every rollout fails)."""
        async for event in self._worker.events():
            live = self._playing.get(int(event.get("id", -1)))
            if live is None:
                continue  # a rollout this side gave up on
            op = event.get("op")
            if op == "model":
                self._spawn(live, self._model_call(live, event))
            elif op == "begin":
                ended = asyncio.Event()
                live.steps[int(event["step"])] = (ended, event)
                self._spawn(live, self._step_span(live, event, ended))
            elif op == "end":
                begun = live.steps.pop(int(event["step"]), None)
                if begun is not None:
                    begun[1]["end"] = event
                    begun[0].set()
                    self._record_step(live, begun[1], event)
            elif op in ("done", "failed") and not live.outcome.done():
                live.outcome.set_result(event)
        await self._worker.reaped()
        gone = {"op": "failed", "status": 502, "step": "worker", "message": self._worker.why_gone()}
        for live in list(self._playing.values()):
            if not live.outcome.done():
                live.outcome.set_result(gone)

    def _spawn(self, live: Live, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, context=live.context)
        live.tasks.add(task)
        task.add_done_callback(live.tasks.discard)

    async def _model_call(self, live: Live, event: WorkerEvent) -> None:
        """One model call of the environment, through the rollout's SDK client (recorded,
        traced, attributed there); its answer, or the model server's refusal, goes back."""
        import openai

        body = dict(event["body"])
        answer: dict[str, object] = {"op": "answer", "id": event["id"], "call": event["call"]}
        try:
            completion = await live.sdk.chat.completions.create(
                model=body.pop("model"), messages=body.pop("messages"), extra_body=body
            )
            answer.update(status=200, body=completion.model_dump(mode="json", exclude_unset=True))
        except openai.APIStatusError as exc:
            answer.update(status=exc.status_code, body=_error_body(exc))
        except openai.APITimeoutError as exc:
            answer.update(status=504, body={"error": {"message": str(exc)}})
        except openai.APIConnectionError as exc:
            answer.update(status=502, body={"error": {"message": str(exc)}})
        self._worker.send(answer)

    async def _step_span(self, live: Live, begin: WorkerEvent, ended: asyncio.Event) -> None:
        """The span of one step, from its ``begin`` to its ``end`` event."""
        rollout_id = live.rollout.rollout_id
        kind = begin.get("kind")
        if kind == "score":
            if not gate.verify:
                return
            with spans.verify_span(rollout_id) as span:
                await ended.wait()
                end = begin.get("end") or {}
                if isinstance(end.get("reward"), int | float):
                    spans.record_evaluation(span, float(end["reward"]))
                    _record_metrics(span, end.get("metrics"))
            return
        if not gate.env:
            return
        if kind == "seed":
            with spans.env_seed_span(rollout_id):
                await ended.wait()
            return
        name = str(begin.get("name") or ENV_RESPONSE)[:128]
        with spans.env_tool_span(rollout_id, name, begin.get("call_id")):
            await ended.wait()

    def _record_step(self, live: Live, begin: WorkerEvent, end: WorkerEvent) -> None:
        """A tool call or an environment turn joins the trajectory when it ends (in order:
        the model call after it is not sent before this event is read)."""
        trajectory = live.rollout.trajectory
        kind = begin.get("kind")
        if trajectory is None or kind not in ("tool", "env_response"):
            return
        name = str(begin.get("name") or ENV_RESPONSE)
        arguments = end.get("arguments")
        if "error" in end:
            trajectory.tool_call(name, arguments, f"error: {end['error']}", error=INVALID_ARGUMENTS)
        else:
            trajectory.tool_call(name, arguments, str(end.get("output") or ""))


def _error_body(exc: Exception) -> dict[str, object]:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        return body if "error" in body else {"error": body}
    return {"error": {"message": str(exc)}}


def _record_metrics(span: Span, metrics: object) -> None:
    """Each reward function and metric of the rubric as a ``gen_ai.evaluation.result``
    event of its own (name, score), beside the reward's."""
    if not isinstance(metrics, dict) or not span.is_recording():
        return
    for name, value in list(metrics.items())[:64]:
        if isinstance(value, int | float) and not isinstance(value, bool):
            span.add_event(
                "gen_ai.evaluation.result",
                {
                    "gen_ai.evaluation.name": str(name)[:128],
                    "gen_ai.evaluation.score.value": float(value),
                },
            )
