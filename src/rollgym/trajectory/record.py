"""Recording one rollout's trajectory at the model boundary, in the process that plays it.

A :class:`TrajectoryRecorder` lives as long as one rollout. Every model call goes through
:meth:`TrajectoryRecorder.model_call` (``RolloutContext.chat`` calls it; any other client an
agent uses calls ``RolloutContext.record_model_call`` with the request body and the answer),
every tool call and the verification through the environment session wrapper, so the turns
are in the order they happened. Nothing is recomputed: token ids and log-probabilities are the
engine's (vLLM's ``prompt_token_ids``, ``choices[].token_ids``, ``logprobs.content``).

The record stays small: each model turn keeps only the messages and prompt tokens that are new
since the previous turn (``messages_start`` / ``prompt_start`` say where they begin), so a
multi-turn rollout is linear in its length, not quadratic. Whether each prompt extends the
previous prompt + completion token for token is checked here and written down, never hidden.
"""

from __future__ import annotations

from typing import Any, Literal

#: Header on ``POST /run`` through which the driver asks for a trajectory: ``turns`` or
#: ``tokens`` (turns plus the engine's token ids and log-probabilities).
CAPTURE_HEADER = "X-Rollgym-Capture"
#: Key of the trajectory in a rollout's answer (the driver takes it out of the result).
TRAJECTORY_KEY = "trajectory"
FORMAT_VERSION = 1
#: Most turns one trajectory records; later ones are counted in ``dropped_turns``.
MAX_TURNS = 4096

Capture = Literal["off", "turns", "tokens"]
_ASKED: dict[str, Capture] = {"turns": "turns", "tokens": "tokens"}
#: The request fields that ask an engine for token ids and log-probabilities (vLLM >= 0.10.2).
TOKEN_REQUEST_FIELDS: dict[str, Any] = {"return_token_ids": True, "logprobs": True}
#: Request keys that are the conversation; the rest (sampling, token capture) are params.
_NOT_PARAMS = frozenset(("messages", "tools", "model", "stream"))


def capture_mode(requested: str | None, trajectories: bool | None, tokens: bool | None) -> Capture:
    """What to record for one rollout. ``requested`` is the driver's header (the run's
    setting); a server's own options ``trajectories`` / ``capture_tokens`` win when set."""
    asked = _ASKED.get(requested or "", "off")
    if tokens:
        return "tokens"
    if trajectories is False:
        return "off"
    if tokens is False:
        return "turns" if trajectories or asked != "off" else "off"
    if trajectories:
        return "tokens" if asked == "tokens" else "turns"
    return asked


def _common_prefix(left: list[Any], right: list[Any]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


def _logprobs_of(choice: dict[str, Any]) -> list[float] | None:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    values = [entry.get("logprob") for entry in content if isinstance(entry, dict)]
    return [float(v) for v in values if isinstance(v, int | float)]


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    return None


class TrajectoryRecorder:
    """The turns of one rollout, in order; :meth:`to_json` is what travels to the driver."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.turns: list[dict[str, Any]] = []
        self.dropped_turns = 0
        self._messages: list[dict[str, Any]] = []  # the previous request's + its answer
        self._tools: Any = None
        self._sequence: list[int] | None = None  # previous prompt + completion ids
        self._prefix_ok = True
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self._model_calls = 0

    @property
    def tokens(self) -> bool:
        return self.capture == "tokens"

    def request_fields(self) -> dict[str, Any]:
        """What every model request adds so the engine answers its tokens."""
        return dict(TOKEN_REQUEST_FIELDS) if self.tokens else {}

    def _add(self, turn: dict[str, Any]) -> None:
        if len(self.turns) >= MAX_TURNS:
            self.dropped_turns += 1
            return
        self.turns.append(turn)

    def model_call(self, request: dict[str, Any], answer: dict[str, Any]) -> None:
        """One chat completion: ``request`` is the body posted, ``answer`` the engine's reply."""
        messages = list(request.get("messages") or [])
        start = _common_prefix(self._messages, messages)
        turn: dict[str, Any] = {
            "type": "model",
            "call": self._model_calls,
            "messages_start": start,
            "messages": messages[start:],
        }
        tools = request.get("tools")
        if tools != self._tools or self._model_calls == 0:
            turn["tools"] = tools
            self._tools = tools
        turn["params"] = {k: v for k, v in request.items() if k not in _NOT_PARAMS}
        choices = answer.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else {}
        message = choice.get("message") if isinstance(choice, dict) else None
        turn["response_id"] = answer.get("id")
        turn["message"] = message
        turn["finish_reason"] = choice.get("finish_reason") if isinstance(choice, dict) else None
        usage = answer.get("usage")
        turn["usage"] = usage
        if isinstance(usage, dict):
            for key in self._usage:
                value = usage.get(key)
                if isinstance(value, int):
                    self._usage[key] += value
        if self.tokens:
            self._record_tokens(turn, answer, choice if isinstance(choice, dict) else {})
        self._messages = [*messages, message] if isinstance(message, dict) else messages
        self._model_calls += 1
        self._add(turn)

    def _record_tokens(
        self, turn: dict[str, Any], answer: dict[str, Any], choice: dict[str, Any]
    ) -> None:
        prompt = _int_list(answer.get("prompt_token_ids"))
        completion = _int_list(choice.get("token_ids"))
        logprobs = _logprobs_of(choice)
        if prompt is None or completion is None:
            turn["tokens_missing"] = True  # the engine did not answer them; never recomputed
            self._sequence = None
            self._prefix_ok = False
            return
        previous = self._sequence
        if previous is not None:
            extends = len(prompt) >= len(previous) and prompt[: len(previous)] == previous
            turn["extends_previous"] = extends
            if not extends:
                self._prefix_ok = False
                turn["mismatch_at"] = _common_prefix(previous, prompt)
        else:
            extends = False
        start = len(previous) if previous is not None and extends else 0
        turn["prompt_start"] = start
        turn["prompt_ids"] = prompt[start:]
        turn["completion_ids"] = completion
        turn["logprobs"] = logprobs
        if logprobs is not None and len(logprobs) != len(completion):
            turn["logprobs_mismatch"] = True  # recorded as the engine gave them
        self._sequence = [*prompt, *completion]

    def tool_call(self, name: str, arguments: dict[str, Any], output: str) -> None:
        """One environment tool call and its text output (what the model reads next)."""
        self._add({"type": "tool", "name": name, "arguments": arguments, "output": output})

    def verify(self, answer: str | None, verdict: dict[str, Any]) -> None:
        """The environment's verification of the final answer."""
        self._add(
            {
                "type": "verify",
                "answer": answer,
                "reward": verdict.get("reward"),
                "details": verdict.get("details"),
            }
        )

    def to_json(self) -> dict[str, Any]:
        """The trajectory as it travels in the rollout's answer (see docs/trajectories.md)."""
        data: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "capture": self.capture,
            "model_calls": self._model_calls,
            "usage": dict(self._usage),
            "turns": self.turns,
        }
        if self.tokens:
            data["prefix_ok"] = self._prefix_ok
        if self.dropped_turns:
            data["dropped_turns"] = self.dropped_turns
        return data


def attach(answer: Any, recorder: TrajectoryRecorder | None) -> Any:
    """Put the trajectory into a rollout's answer (an answer that is not an object is left
    alone: the reward check refuses it anyway)."""
    if recorder is not None and isinstance(answer, dict):
        answer[TRAJECTORY_KEY] = recorder.to_json()
    return answer
