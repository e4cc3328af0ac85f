"""``impl: verifiers``: an environment written with verifiers, played by its own rollout loop.

A verifiers environment (``vf.SingleTurnEnv``, ``vf.ToolEnv``, ``vf.MultiTurnEnv`` or any
``vf.Environment``, with its ``vf.Rubric``) owns its rollout: it calls the model through an
OpenAI-compatible client, runs its tools and environment turns, and its rubric scores the
result. So in rollgym it is an episode server: an environment whose ``/run`` plays one row by
calling the environment's own ``rollout`` with verifiers' ``OpenAIChatCompletionsClient``
around the rollout's :meth:`RolloutContext.async_openai` client, pointed at rollgym's model
server. Every model call is therefore rollout-attributed (``X-Request-Id``, the scoped URL),
traced (``gym.model.chat``), token-captured and policy-versioned like a built-in's; the
rubric then scores the state under ``gym.verify``, each reward function and metric an
evaluation of its own. The steps verifiers exposes are spans too
(:mod:`rollgym.builtins.envs.verifiers_hooks`).

A row names its example: ``example_id`` (or the integer ``task_id`` of a task-set route) picks
a row of the environment's own dataset (``dataset: eval``, falling back to ``train``); a row
with a ``prompt`` is a verifiers rollout input itself (``prompt``, ``answer``, ``info``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rollgym.builtins.envs.verifiers_hooks import CURRENT, Playing, instrument, message_text
from rollgym.builtins.envs.verifiers_load import load_environment, one_line, verifiers_package
from rollgym.servers import (
    Environment,
    EnvironmentOptions,
    HTTPError,
    RolloutContext,
    ServerContext,
    ServerOptions,
    SessionState,
    SetupProblem,
    Verdict,
    gate,
    spans,
)

#: A verifiers input's own fields: what a row given inline may carry to the environment.
INPUT_FIELDS = ("prompt", "answer", "info", "task", "example_id")
#: The status of a model call that was refused for good (as rollgym.servers.answers names it).
FAILED_DEPENDENCY = 424


class VerifiersOptions(EnvironmentOptions):
    """Which verifiers environment to load, and how a row becomes its rollout."""

    verifiers_environment: str = Field(
        description="'module' exposing load_environment(**args), or 'module:object' (an "
        "environment, or a function returning one), importable from the working directory."
    )
    verifiers_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of load_environment()."
    )
    dataset: Literal["eval", "train"] = Field(
        "eval", description="The dataset an example_id indexes (eval falls back to train)."
    )
    rollout_timeout_s: float = Field(
        600.0, gt=0, description="Time for one whole rollout, scoring included."
    )

    @model_validator(mode="after")
    def _needs_a_model(self) -> VerifiersOptions:
        if self.model is None:
            raise ValueError(
                "'model' is required: a verifiers environment plays its own rollouts, "
                "against this model server"
            )
        return self


class VerifiersEnv(Environment):
    """A verifiers environment's rollouts as rollgym episodes (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = VerifiersOptions
    uses_openai_sdk: ClassVar[bool] = True

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        options = self.verifiers_options
        self._vf = verifiers_package()
        self.env: Any = load_environment(options.verifiers_environment, options.verifiers_args)
        if self.env.requires_group_rollouts:
            raise SetupProblem(
                "verifiers_environment",
                f"{options.verifiers_environment!r} scores with group reward functions, which need "
                "every rollout of a group at once: not supported",
            )
        self.where = f"verifiers environment {options.verifiers_environment!r}"
        instrument(self.env, self._vf.ToolEnv)
        self._examples: Any = None

    @property
    def verifiers_options(self) -> VerifiersOptions:
        assert isinstance(self.options, VerifiersOptions)
        return self.options

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
        finally:
            teardown = getattr(self.env, "_teardown", None)
            if callable(teardown):
                try:
                    await teardown()
                except Exception as exc:  # its own resources: said, never a traceback
                    print(f"{self.where}: teardown failed: {one_line(exc)}", flush=True)

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
        """The environment's own rollout, scored by its rubric, bounded by
        ``rollout_timeout_s``; every failure an HTTPError of one line naming the step."""
        options = self.verifiers_options
        rollout_input = self._input_of(task)
        client = self._vf.OpenAIChatCompletionsClient(rollout.async_openai())
        model_name = options.model_name or options.model
        assert model_name is not None  # the options require a model
        sampling = self._sampling(rollout, task)
        token = CURRENT.set(Playing(rollout.rollout_id, rollout.trajectory))
        try:
            async with asyncio.timeout(options.rollout_timeout_s):
                state = await self._rollout(rollout_input, client, model_name, sampling)
                self._refuse_failed(state)
                verdict = await self._score(rollout.rollout_id, state)
        except TimeoutError:
            raise self._failed(
                504, "rollout", f"no end within {options.rollout_timeout_s:g} s"
            ) from None
        finally:
            CURRENT.reset(token)
        answer = _final_answer(state)
        if rollout.trajectory is not None:
            rollout.trajectory.verify(
                answer, {"reward": verdict.reward, "details": verdict.details}
            )
        return {
            "reward": verdict.reward,
            "answer": answer,
            "tool_calls": _tool_calls(state),
            "details": verdict.details,
        }

    async def _rollout(self, rollout_input: Any, client: Any, model: str, sampling: Any) -> Any:
        # verifiers' tasks copy this context: the wrapped steps find the rollout in CURRENT.
        try:
            return await self.env.rollout(rollout_input, client, model, sampling)
        except (HTTPError, TimeoutError):
            raise
        except Exception as exc:  # the environment's own code raised out of its rollout
            raise self._failed(502, "rollout", f"{type(exc).__name__}: {one_line(exc)}") from None

    def _refuse_failed(self, state: Mapping[str, Any]) -> None:
        """A rollout whose model call failed, or whose infrastructure did, is a failure of
        the rollout (retried where the model's answer says so), not a reward of 0."""
        error = state.get("error")
        if error is None:
            return
        status = _model_status(error)
        if status is not None:
            raise self._failed(status, "model call", _chain_text(error))
        if isinstance(error, self._vf.InfraError):
            raise self._failed(502, "rollout", _chain_text(error))

    async def _score(self, rollout_id: str | None, state: Any) -> Verdict:
        """The rubric's score of the state (``score_rollout``, then its cleanup), under
        ``gym.verify``: the reward, and each reward function and metric as an evaluation."""
        if gate.verify:
            with spans.verify_span(rollout_id) as span:
                verdict = await self._scored(state)
                spans.record_evaluation(span, verdict.reward)
                _record_metrics(span, verdict.details.get("metrics"))
        else:
            verdict = await self._scored(state)
        self.aggregates.record_verify(verdict.reward)
        return verdict

    async def _scored(self, state: Any) -> Verdict:
        rubric = self.env.rubric
        try:
            if self.env.score_rollouts:
                await rubric.score_rollout(state)
            else:
                await rubric.dummy_score_rollout(state)
            await rubric.cleanup(state)
        except Exception as exc:
            raise self._failed(502, "score", f"{type(exc).__name__}: {one_line(exc)}") from None
        reward = state.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise self._failed(502, "score", f"the rubric scored {reward!r}, not a number")
        metrics = {
            str(k): float(v)
            for k, v in (state.get("metrics") or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        details: dict[str, Any] = {
            "metrics": metrics,
            "stop_condition": state.get("stop_condition"),
            "turns": len(state.get("trajectory") or []),
            "is_truncated": bool(state.get("is_truncated")),
        }
        error = state.get("error")
        if error is not None:  # an error the environment ends its rollout on, and scores
            details["error"] = _chain_text(error)
        return Verdict(reward=float(reward), details=details)

    # --- the row --------------------------------------------------------------------------------------

    def _input_of(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """The verifiers ``RolloutInput`` of a row: given inline (``prompt``), or the example
        of the environment's dataset that ``example_id`` / the task id names."""
        if "prompt" in task:
            given = {k: task[k] for k in INPUT_FIELDS if k in task}
            given.setdefault("example_id", 0)
            given.setdefault("answer", "")
            if isinstance(given["prompt"], str):
                given["prompt"] = [{"role": "user", "content": given["prompt"]}]
            if self.env.system_prompt and not any(
                isinstance(m, dict) and m.get("role") == "system" for m in given["prompt"]
            ):
                system = {"role": "system", "content": self.env.system_prompt}
                given["prompt"] = [system, *given["prompt"]]
            return given
        index = _example_index(task)
        examples = self._dataset()
        if not 0 <= index < len(examples):
            raise HTTPError(
                400,
                f"environment {self.context.name!r}: example {index} is not in the "
                f"{self.verifiers_options.dataset} dataset ({len(examples)} examples)",
                field="task",
            )
        return dict(examples[index])

    def _dataset(self) -> Any:
        """The environment's dataset, built (and formatted by verifiers) on first use."""
        if self._examples is None:
            env = self.env
            try:
                if self.verifiers_options.dataset == "eval" and (
                    env.eval_dataset is not None or env.eval_dataset_source is not None
                ):
                    self._examples = env.get_eval_dataset()
                else:
                    self._examples = env.get_dataset()
            except Exception as exc:
                raise self._failed(
                    502, "dataset", f"{type(exc).__name__}: {one_line(exc)}"
                ) from None
        return self._examples

    def _sampling(self, rollout: RolloutContext, task: Mapping[str, Any]) -> dict[str, Any]:
        """The environment's sampling arguments, then the server's and the row's
        (``sampling``), then what the trajectory's token capture asks of the engine."""
        sampling: dict[str, Any] = dict(self.env.sampling_args)
        extra = dict(sampling.pop("extra_body", None) or {})
        ours = self.verifiers_options.sampling_for(task.get("sampling"))
        capture = rollout.trajectory.request_fields() if rollout.trajectory is not None else {}
        sampling.update(ours)
        sampling.update(capture)
        if "top_logprobs" in ours:  # the row's choice wins over capture's 0
            sampling["top_logprobs"] = ours["top_logprobs"]
        sampling.pop("n", None)  # one completion a call: rollgym counts one rollout per row
        if extra:
            sampling["extra_body"] = extra
        return sampling

    def _failed(self, status: int, step: str, detail: str) -> HTTPError:
        return HTTPError(
            status, f"environment {self.context.name!r} ({self.where}): {step}: {detail}"
        )


def _example_index(task: Mapping[str, Any]) -> int:
    """The example a row names: ``example_id``, else the integer id of its task-set route."""
    value: object = task.get("example_id")
    if value is None:
        task_id = task.get("task_id")
        value = task_id.get("task_id") if isinstance(task_id, dict) else task_id
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            "a row needs 'prompt' (a verifiers input) or 'example_id' (an integer index "
            f"into the environment's dataset), got {value!r}"
        )
    return value


def _model_status(error: BaseException) -> int | None:
    """The status a failed model call answers with, if ``error`` is one: verifiers wraps the
    OpenAI SDK's error in its ModelError; a refusal for good (4xx) is not retried."""
    try:
        import openai
    except ImportError:
        return None
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, openai.APITimeoutError):
            return 504
        if isinstance(seen, openai.APIStatusError):
            code = seen.status_code
            return FAILED_DEPENDENCY if 400 <= code < 500 and code not in (408, 429) else 502
        if isinstance(seen, openai.APIConnectionError):
            return 502
        seen = seen.__cause__ or seen.__context__
    return None


def _chain_text(error: BaseException) -> str:
    """An error and what caused it, on one line (verifiers' errors often say nothing)."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 4:
        text = one_line(seen)
        parts.append(
            type(seen).__name__ if text == type(seen).__name__ else f"{type(seen).__name__}: {text}"
        )
        seen = seen.__cause__ or seen.__context__
    return one_line(Exception(" <- ".join(parts)))


def _final_answer(state: Mapping[str, Any]) -> str | None:
    """The text of the last assistant message of the completion."""
    for message in reversed(state.get("completion") or []):
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
        if role == "assistant":
            return message_text(message)
    return None


def _tool_calls(state: Mapping[str, Any]) -> int:
    count = 0
    for message in state.get("completion") or []:
        calls = (
            message.get("tool_calls")
            if isinstance(message, dict)
            else getattr(message, "tool_calls", None)
        )
        if isinstance(calls, list):
            count += len(calls)
    return count


def _record_metrics(span: Any, metrics: object) -> None:
    """Each reward function and metric of the rubric as a ``gen_ai.evaluation.result``
    event of its own (name, score), beside the reward's."""
    if not isinstance(metrics, dict) or not span.is_recording():
        return
    for name, value in list(metrics.items())[:64]:
        span.add_event(
            "gen_ai.evaluation.result",
            {"gen_ai.evaluation.name": str(name)[:128], "gen_ai.evaluation.score.value": value},
        )
