"""A streamed chat completion joined back into the answer a non-streamed call would get.

An agent that asks its SDK client for ``stream: true`` reads ``chat.completion.chunk`` events
(server-sent events, ``data: {...}`` then ``data: [DONE]``). The trajectory records the same
answer as for a plain call, so :class:`ChatStreamJoiner` is fed the stream's bytes as they
pass and rebuilds one ``chat.completion``: per choice the content (concatenated), the tool
calls (merged by their ``index``: id, type and name from the first delta, ``arguments``
concatenated), the finish reason; the usage of the chunk that carries it
(``stream_options.include_usage``); and the engine's token fields where it streams them, as
vLLM does: ``prompt_token_ids`` on a chunk, ``choices[].token_ids`` and
``choices[].logprobs.content`` per chunk, concatenated in order.

A chat stream that did not come through whole is marked, never joined into what looks like a
whole answer: an event that is not a JSON object (``stream_damaged``: its content is lost) or
an error event (``stream_error``) marks the answer incomplete whatever follows them
(:mod:`rollgym.trajectory.completeness`).
"""

from __future__ import annotations

from typing import Any

import orjson

from rollgym.trajectory.completeness import (
    INCOMPLETE,
    STREAM_DAMAGED,
    STREAM_ERROR,
    STREAM_INCOMPLETE,
)

_DONE = b"[DONE]"


class _Choice:
    """What the chunks of one choice said so far."""

    __slots__ = ("content", "finish_reason", "logprobs", "role", "token_ids", "tool_calls")

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.token_ids: list[Any] | None = None
        self.logprobs: list[Any] | None = None

    def add(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("role"), str):
                self.role = delta["role"]
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._add_call(call)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            self.token_ids = self.token_ids or []
            self.token_ids += ids
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if isinstance(content, list):
            self.logprobs = self.logprobs or []
            self.logprobs += content

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}}
        )
        for key in ("id", "type"):
            if delta.get(key):
                call[key] = delta[key]
        function = delta.get("function")
        if isinstance(function, dict):
            if function.get("name"):
                call["function"]["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]

    def to_json(self, index: int) -> dict[str, Any]:
        message: dict[str, object] = {
            "role": self.role,
            "content": "".join(self.content) if self.content else None,
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        choice: dict[str, object] = {
            "index": index,
            "message": message,
            "finish_reason": self.finish_reason,
        }
        if self.token_ids is not None:
            choice["token_ids"] = self.token_ids
        if self.logprobs is not None:
            choice["logprobs"] = {"content": self.logprobs}
        return choice


class SseJoiner:
    """Server-sent events fed in any pieces; each complete event's ``data`` goes to
    :meth:`_data` (a subclass's), ``data: [DONE]`` sets :attr:`done`, an event whose ``data``
    is not a JSON object sets :attr:`damaged`."""

    def __init__(self) -> None:
        self._pending = b""
        #: The stream ended with ``data: [DONE]`` (a stream cut short has not).
        self.done = False
        #: An event's data was not a JSON object: the SDK raised on it, and what it carried
        #: is not in the joined answer.
        self.damaged = False

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream; complete events are read at once."""
        self._pending += data
        *events, self._pending = self._pending.replace(b"\r\n", b"\n").split(b"\n\n")
        for event in events:
            self._event(event)

    def _event(self, event: bytes) -> None:
        payload = b"".join(
            line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")
        )
        if not payload:
            return
        if payload == _DONE:
            self.done = True
            return
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.damaged = True  # the SDK raises on it; the answer is marked, not joined as whole
            return
        if isinstance(data, dict):
            self._data(data)
        else:
            self.damaged = True

    def _data(self, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def answer(self) -> dict[str, Any]:
        """The answer the events add up to, as a ``chat.completion`` (what the recorder takes)."""
        raise NotImplementedError


class ChatStreamJoiner(SseJoiner):
    """Fed a chat completion's SSE bytes in any pieces; :meth:`answer` is the joined answer."""

    def __init__(self) -> None:
        super().__init__()
        self._head: dict[str, object] = {}
        self._choices: dict[int, _Choice] = {}
        self._usage: object = None
        self._prompt_ids: object = None
        #: The engine sent an error event (the SDK raises it as an ``APIError``).
        self._error = False

    def _data(self, data: dict[str, Any]) -> None:
        if data.get("error") is not None or data.get("object") == "error":
            self._error = True  # vLLM's error event: {"error": {...}}, or older {"object": "error"}
            return
        self._chunk(data)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if not self._head:
            self._head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        if isinstance(chunk.get("prompt_token_ids"), list):
            self._prompt_ids = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._choices.setdefault(choice.get("index", 0), _Choice()).add(choice)

    def answer(self) -> dict[str, Any]:
        """The ``chat.completion`` the chunks add up to (what the recorder takes)."""
        self.feed(b"\n\n")  # a last event without its blank line
        answer: dict[str, object] = {
            **self._head,
            "object": "chat.completion",
            "choices": [self._choices[i].to_json(i) for i in sorted(self._choices)],
            "usage": self._usage,
        }
        if self._prompt_ids is not None:
            answer["prompt_token_ids"] = self._prompt_ids
        if not self.done:
            answer[STREAM_INCOMPLETE] = True  # what it had is recorded, and marked
        if self.damaged:
            answer[INCOMPLETE] = STREAM_DAMAGED
        elif self._error:
            answer[INCOMPLETE] = STREAM_ERROR
        return answer
