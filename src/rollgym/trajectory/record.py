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

import struct
from array import array
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any, Literal, TypeVar

import rollgym.policy_versions as policy_versions
from rollgym.trajectory.completeness import INCOMPLETE, STREAM_INCOMPLETE, incomplete_reason
from rollgym.trajectory.messages import same_message

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
#: ``top_logprobs: 0`` (no alternatives) because some engines answer ``logprobs: null`` to
#: ``logprobs: true`` alone (llama-cpp-python's server computes them only when it is set);
#: vLLM and OpenAI accept 0 as "the chosen token's only". A ``top_logprobs`` the agent's or
#: the row's ``sampling`` sets wins over this 0.
TOKEN_REQUEST_FIELDS: dict[str, object] = {
    "return_token_ids": True,
    "logprobs": True,
    "top_logprobs": 0,
}
#: The key that marks a request made through another API than chat completions (on the
#: request the recorder is given, and on its turn), and its one value so far.
API_KEY = "api"
RESPONSES_API = "responses"
#: Request keys that are the conversation; the rest (sampling, token capture) are params.
_NOT_PARAMS = frozenset(("messages", "tools", "model", "stream", API_KEY))
#: Default of the most UTF-8 bytes one tool output (or message text) keeps in a trajectory.
TOOL_OUTPUT_MAX_BYTES = 64 * 1024
#: Turn fields held as compact arrays while the rollout runs, lists once written.
_ARRAY_FIELDS = ("prompt_ids", "completion_ids", "logprobs")

#: What a model server stamped on an answer about its policy version, kept on the turn.
_VERSION_KEYS = (
    policy_versions.ANSWER_KEY,
    policy_versions.ANSWER_END_KEY,
    policy_versions.ENGINE_KEY,
    policy_versions.TOKEN_SPANS_KEY,
)


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


def _common_prefix(left: Iterable[object], right: Iterable[object]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


def _common_messages(left: Iterable[object], right: Iterable[object]) -> int:
    """How many messages two conversations share from the start, a message matching its own
    other spelling (an SDK's ``model_dump(exclude_none=True)`` of the recorded answer)."""
    count = 0
    for a, b in zip(left, right, strict=False):
        if not same_message(a, b):
            break
        count += 1
    return count


def _starts_with(ids: array[int], pieces: list[array[int]], length: int) -> bool:
    """Whether ``ids`` begins with the pieces laid end to end (``length`` in all). Each piece
    is compared as one array slice (a memcpy and a memcmp), so the previous sequence need not
    be held a second time: the pieces are the arrays the turns already keep."""
    if len(ids) < length:
        return False
    offset = 0
    for piece in pieces:
        end = offset + len(piece)
        if ids[offset:end] != piece:
            return False
        offset = end
    return True


def _token_ids(value: object) -> array[int] | None:
    """The engine's token ids as a compact array, or None unless a list of integers.

    ``struct.pack`` checks every item in C (a float, a string or null fails), several times
    faster than a Python loop, and the array keeps 8 bytes a token instead of a list's
    pointer plus an int object."""
    if type(value) is not list:
        return None
    try:
        packed = struct.pack(f"{len(value)}q", *value)
    except struct.error:
        return None
    ids = array("q")
    ids.frombytes(packed)
    return ids


_LOGPROB = itemgetter("logprob")


def _logprob_content(choice: Mapping[str, object]) -> list[object] | None:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return content if isinstance(content, list) else None


def _logprobs_of(content: list[Any]) -> array[float]:
    """``content[].logprob`` as a compact array (read in C); entries that are not objects or
    carry no number are left out, so a short result shows as ``logprobs_mismatch``."""
    try:
        return array("d", map(_LOGPROB, content))
    except (KeyError, TypeError):
        values = [entry.get("logprob") for entry in content if isinstance(entry, dict)]
        return array("d", [v for v in values if isinstance(v, int | float)])


def _top_logprobs_of(content: Sequence[object]) -> tuple[list[list[str]], list[list[float]]]:
    """Per generated token, its alternatives: their token strings and log-probabilities, in
    the engine's order (``content[].top_logprobs[].{token, logprob}``)."""
    tokens: list[list[str]] = []
    logprobs: list[list[float]] = []
    for entry in content:
        top = entry.get("top_logprobs") if isinstance(entry, dict) else None
        pairs = [t for t in top if isinstance(t, dict)] if isinstance(top, list) else []
        tokens.append([str(t.get("token", "")) for t in pairs])
        logprobs.append([float(t.get("logprob") or 0.0) for t in pairs])
    return tokens, logprobs


def cut_text(text: str, max_bytes: int) -> tuple[str, int] | None:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (at a character boundary) and its
    whole size in bytes, or None when it fits (a text of at most ``max_bytes / 4``
    characters fits without being encoded)."""
    if len(text) <= max_bytes // 4:
        return None
    data = text.encode()
    if len(data) <= max_bytes:
        return None
    return data[:max_bytes].decode("utf-8", "ignore"), len(data)


def _index_of(entry: object) -> int:
    index = entry.get("index") if isinstance(entry, dict) else None
    return index if isinstance(index, int) else 0


def _plain(turn: dict[str, object]) -> dict[str, object]:
    """A model turn with its compact token arrays as lists (what JSON writes)."""
    if "prompt_ids" not in turn and "logprobs" not in turn:
        return turn
    out = dict(turn)
    for key in _ARRAY_FIELDS:
        value = out.get(key)
        if isinstance(value, array):
            out[key] = value.tolist()
    return out


class TrajectoryRecorder:
    """The turns of one rollout, in order; :meth:`to_json` is what travels to the driver.

    ``tool_output_max_bytes`` bounds every text it keeps from the environment: a tool turn's
    ``output`` and the text of a request message longer than that are cut (at a character
    boundary) and marked, never silently, so one rollout's record stays bounded in memory.
    """

    def __init__(self, capture: Capture, *, tool_output_max_bytes: int = TOOL_OUTPUT_MAX_BYTES):
        self.capture = capture
        self.tool_output_max_bytes = tool_output_max_bytes
        self.turns: list[dict[str, object]] = []
        self.dropped_turns = 0
        self.truncated = 0  # texts cut to tool_output_max_bytes
        self._messages: list[object] = []  # the previous request's + its answer
        self._tools: object = None
        #: The previous prompt + completion, as the arrays the turns hold; None: unknown.
        self._pieces: list[array[int]] | None = None
        self._length = 0
        self._prefix_ok = True
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self._model_calls = 0
        #: Model calls recorded with an answer that was not whole (``completeness``).
        self.incomplete = 0
        #: The previous model turn while it has other choices, and how many messages its
        #: request had: where the next request shows which choice the agent kept.
        self._last_turn: dict[str, object] | None = None
        self._last_request_length = 0

    @property
    def tokens(self) -> bool:
        return self.capture == "tokens"

    def request_fields(self) -> dict[str, object]:
        """What every model request adds so the engine answers its tokens."""
        return dict(TOKEN_REQUEST_FIELDS) if self.tokens else {}

    def _add(self, turn: dict[str, object]) -> None:
        if len(self.turns) >= MAX_TURNS:
            self.dropped_turns += 1
            return
        self.turns.append(turn)

    def model_call(
        self,
        request: Mapping[str, object],
        answer: Mapping[str, object],
        *,
        request_id: str | None = None,
    ) -> None:
        """One chat completion: ``request`` is the body posted, ``answer`` the engine's reply,
        ``request_id`` the ``X-Request-Id`` it was sent with (``<rollout id>.<turn>``)."""
        sent = request.get("messages")
        messages: list[object] = list(sent) if isinstance(sent, list | tuple) else []
        self._settle_choice(messages)
        start = _common_messages(self._messages, messages)
        kept, cut = self._bounded(messages[start:])
        turn: dict[str, object] = {
            "type": "model",
            "call": self._model_calls,
            "messages_start": start,
            "messages": kept,
        }
        if request_id is not None:
            turn["request_id"] = request_id
        if cut:
            turn["truncated_messages"] = cut
        tools = request.get("tools")
        if tools != self._tools or self._model_calls == 0:
            turn["tools"] = tools
            self._tools = tools
        params = {k: v for k, v in request.items() if k not in _NOT_PARAMS}
        turn["params"] = params
        found = answer.get("choices")
        choices = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
        choice = choices[0] if choices else {}
        message = choice.get("message")
        turn["response_id"] = answer.get("id")
        model = answer.get("model") or request.get("model")
        if isinstance(model, str):
            turn["model"] = model  # the engine's name for it; the request's when it says none
        if request.get(API_KEY) == RESPONSES_API:  # recorded as the chat call it amounts to
            turn[API_KEY] = RESPONSES_API
            turn["status"] = answer.get("status")
        if request.get("stream"):
            turn["streamed"] = True  # joined from its chunks (trajectory.stream)
            if answer.get(STREAM_INCOMPLETE):
                turn[STREAM_INCOMPLETE] = True
        reason = incomplete_reason(answer)
        if reason is not None:
            turn[INCOMPLETE] = reason  # never recorded as a whole answer
            self.incomplete += 1
        turn["message"] = message
        turn["finish_reason"] = choice.get("finish_reason")
        usage = answer.get("usage")
        turn["usage"] = usage
        if isinstance(usage, dict):
            for key in self._usage:
                value = usage.get(key)
                if isinstance(value, int):
                    self._usage[key] += value
        for key in _VERSION_KEYS:  # the policy version(s) the call ran under, where stamped
            if key in answer:
                turn[key] = answer[key]
        if self.tokens:
            self._record_tokens(turn, answer, choice, bool(params.get("top_logprobs")))
        if len(choices) > 1:
            turn["n"] = len(choices)
            turn["chosen"] = choice.get("index", 0)
            turn["other_choices"] = [self._choice_entry(c, i) for i, c in enumerate(choices) if i]
        self._last_turn = turn if len(choices) > 1 else None
        self._last_request_length = len(messages)
        self._messages = [*messages, message] if isinstance(message, dict) else messages
        self._model_calls += 1
        self._add(turn)

    def _choice_entry(self, choice: Mapping[str, object], position: int) -> dict[str, object]:
        """A choice not kept as the turn's ``message``, as captured."""
        ids = _token_ids(choice.get("token_ids")) if self.tokens else None
        content = _logprob_content(choice) if self.tokens else None
        index = choice.get("index")
        return {
            "index": index if isinstance(index, int) else position,
            "message": choice.get("message"),
            "finish_reason": choice.get("finish_reason"),
            "completion_ids": ids.tolist() if ids is not None else None,
            "logprobs": _logprobs_of(content).tolist() if content is not None else None,
        }

    def _settle_choice(self, messages: list[object]) -> None:
        """Which choice of the previous call the agent kept: the one this request carries
        where the previous request ended. When it is not the one kept as ``message``, the two
        trade places (tokens included), so ``message`` is always what the conversation went
        on with and the token sequence follows it."""
        turn, self._last_turn = self._last_turn, None
        if turn is None or len(messages) <= self._last_request_length:
            return
        carried = messages[self._last_request_length]
        if same_message(carried, turn.get("message")):
            return
        others = turn.get("other_choices")
        if not isinstance(others, list):
            return
        for position, other in enumerate(others):
            if isinstance(other, dict) and same_message(carried, other.get("message")):
                self._trade(turn, others, position, other)
                return

    def _trade(
        self,
        turn: dict[str, object],
        others: list[object],
        position: int,
        other: dict[str, object],
    ) -> None:
        """Make ``other`` (``others[position]``) the turn's kept choice, the kept one an other."""
        was: dict[str, object] = {"index": turn.get("chosen", 0)}
        for key in ("message", "finish_reason", "completion_ids", "logprobs"):
            value = turn.get(key)
            was[key] = value.tolist() if isinstance(value, array) else value
        turn["chosen"] = other["index"]
        turn["message"] = other["message"]
        turn["finish_reason"] = other["finish_reason"]
        ids, logprobs = other.get("completion_ids"), other.get("logprobs")
        for key in ("top_tokens", "top_logprobs", "logprobs_mismatch"):
            turn.pop(key, None)  # they described the choice that is no longer kept
        if "logprobs" in turn:
            turn["logprobs"] = array("d", logprobs) if isinstance(logprobs, list) else None
        if "completion_ids" in turn:
            completion = _token_ids(ids)
            turn["completion_ids"] = completion
            if self._pieces and completion is not None:
                self._length += len(completion) - len(self._pieces[-1])
                self._pieces[-1] = completion
            else:  # the kept choice's tokens are unknown: the next prompt cannot be checked
                self._pieces = None
        others[position] = was
        others.sort(key=_index_of)
        if isinstance(was["message"], dict):
            self._messages[-1] = turn["message"]
        else:
            self._messages.append(turn["message"])

    def _bounded(self, messages: list[object]) -> tuple[list[object], list[dict[str, int]]]:
        """``messages`` with each text over the cap replaced by a cut copy, and which were cut
        (``{"message": index, "bytes": whole size}``)."""
        kept = messages
        cut: list[dict[str, int]] = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if not isinstance(content, str):
                continue
            short = cut_text(content, self.tool_output_max_bytes)
            if short is not None:
                kept = list(messages) if kept is messages else kept
                kept[index] = {**message, "content": short[0]}
                cut.append({"message": index, "bytes": short[1]})
                self.truncated += 1
        return kept, cut

    def _record_tokens(
        self,
        turn: dict[str, object],
        answer: Mapping[str, object],
        choice: Mapping[str, object],
        top: bool,
    ) -> None:
        prompt = _token_ids(answer.get("prompt_token_ids"))
        completion = _token_ids(choice.get("token_ids"))
        content = _logprob_content(choice)
        missing = [
            name
            for name, value in (
                ("prompt_ids", prompt),
                ("completion_ids", completion),
                ("logprobs", content),
            )
            if value is None
        ]
        if missing:
            turn["missing"] = missing  # what the engine did not answer; never recomputed
        if prompt is None or completion is None:
            turn["tokens_missing"] = True
            # the log-probabilities the engine gave are kept even without token ids
            if content is not None:
                turn["logprobs"] = _logprobs_of(content)
                if top:
                    turn["top_tokens"], turn["top_logprobs"] = _top_logprobs_of(content)
            self._pieces = None
            self._prefix_ok = False
            return
        pieces = self._pieces
        extends = False
        if pieces is not None:
            extends = _starts_with(prompt, pieces, self._length)
            turn["extends_previous"] = extends
            if not extends:
                self._prefix_ok = False
                turn["mismatch_at"] = _common_prefix(chain.from_iterable(pieces), prompt)
        start = self._length if extends else 0
        kept = prompt[start:] if start else prompt
        turn["prompt_start"] = start
        turn["prompt_ids"] = kept
        turn["completion_ids"] = completion
        logprobs = _logprobs_of(content) if content is not None else None
        turn["logprobs"] = logprobs
        if logprobs is not None and len(logprobs) != len(completion):
            turn["logprobs_mismatch"] = True  # recorded as the engine gave them
        if top and content is not None:
            turn["top_tokens"], turn["top_logprobs"] = _top_logprobs_of(content)
        if extends and pieces is not None:
            pieces += (kept, completion)
        else:
            self._pieces = [kept, completion]
        self._length = len(prompt) + len(completion)

    def tool_call(
        self, name: str, arguments: object, output: str, *, error: str | None = None
    ) -> None:
        """One environment tool call and its text output (what the model reads next); an
        output over ``tool_output_max_bytes`` is cut and marked ``truncated``. ``error``: the
        model's mistake the call was answered with (``arguments`` then as the model wrote
        them, e.g. the text ``"true"``)."""
        turn: dict[str, object] = {"type": "tool", "name": name, "arguments": arguments}
        cut = cut_text(output, self.tool_output_max_bytes)
        if cut is None:
            turn["output"] = output
        else:
            turn["output"], turn["output_bytes"] = cut
            turn["truncated"] = True
            self.truncated += 1
        if error is not None:
            turn["error"] = error
        self._add(turn)

    def verify(self, answer: str | None, verdict: Mapping[str, object]) -> None:
        """The environment's verification of the final answer."""
        self._add(
            {
                "type": "verify",
                "answer": answer,
                "reward": verdict.get("reward"),
                "details": verdict.get("details"),
            }
        )

    def to_json(self) -> dict[str, object]:
        """The trajectory as it travels in the rollout's answer (see docs/trajectories.md)."""
        data: dict[str, object] = {
            "version": FORMAT_VERSION,
            "capture": self.capture,
            "model_calls": self._model_calls,
            "usage": dict(self._usage),
            "turns": [_plain(turn) for turn in self.turns] if self.tokens else self.turns,
        }
        if self.tokens:
            data["prefix_ok"] = self._prefix_ok
        if self.incomplete:
            data["incomplete_calls"] = self.incomplete
        if self.dropped_turns:
            data["dropped_turns"] = self.dropped_turns
        if self.truncated:
            data["truncated_texts"] = self.truncated
            data["tool_output_max_bytes"] = self.tool_output_max_bytes
        return data


#: An answer goes back as it came (the trajectory added when it is an object).
_Answer = TypeVar("_Answer")


def attach(answer: _Answer, recorder: TrajectoryRecorder | None) -> _Answer:
    """Put the trajectory into a rollout's answer (an answer that is not an object is left
    alone: the reward check refuses it anyway)."""
    if recorder is not None and isinstance(answer, dict):
        answer[TRAJECTORY_KEY] = recorder.to_json()
    return answer
