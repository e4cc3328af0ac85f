"""Server-sent events of the OpenAI APIs, built from a finished answer.

A model server that generates a whole answer at once (the simulated policy, or a proxy whose
upstream answered without streaming) still streams to a client that asked for it: the answer
is cut into the chunks (chat, ``chat.completion.chunk``) or the events (Responses,
``response.output_text.delta`` and friends) the OpenAI SDKs parse. A proxy in front of an
upstream that streams passes the upstream's bytes through instead (see ``openai_upstream``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Protocol

import orjson

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"


def data_line(payload: object) -> bytes:
    """One ``data:`` event (chat completions name no event type)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def event(kind: str, payload: Mapping[str, object]) -> bytes:
    """One named event (the Responses API names each event by its ``type``)."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


async def primed(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``events`` with its first item already produced.

    A stream whose start fails (a refusal, an unreachable upstream) raises here, before the
    HTTP status is sent, so the client gets a normal error answer instead of a broken stream.
    """
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = b""

    async def rest() -> AsyncIterator[bytes]:
        if first:
            yield first
        async for item in events:
            yield item

    return rest()


# --- chat completions -------------------------------------------------------------------------


#: Tokens per chunk when an answer's engine token fields are streamed.
TOKENS_PER_CHUNK = 16


def chat_chunks(answer: Mapping[str, object], *, include_usage: bool) -> Iterator[bytes]:
    """The ``chat.completion.chunk`` events of a ``chat.completion``, then ``[DONE]``.

    Per choice: the role, the content word by word, the tool calls (whole), the engine's token
    fields if the answer has them (``token_ids`` and ``logprobs.content``, as vLLM streams
    them: per chunk, here :data:`TOKENS_PER_CHUNK` at a time), the finish reason. The first
    chunk carries the answer's ``prompt_token_ids`` (and ``prompt_text``), if any; an answer's
    ``system_fingerprint`` is on every chunk and a choice's ``stop_reason`` on its last, as vLLM
    streams them. With ``include_usage``
    (``stream_options.include_usage``) a last chunk with no choices carries the usage, as
    OpenAI sends it.
    """
    head = {
        "id": answer.get("id"),
        "object": "chat.completion.chunk",
        "created": answer.get("created"),
        "model": answer.get("model"),
    }
    if "system_fingerprint" in answer:  # vLLM's engine fields are streamed where vLLM puts them
        head["system_fingerprint"] = answer["system_fingerprint"]
    first = {k: answer[k] for k in ("prompt_token_ids", "prompt_text") if k in answer}

    def chunk(
        index: int, delta: dict[str, object], finish: str | None = None, /, **engine: object
    ) -> bytes:
        nonlocal first
        choice: dict[str, object] = {
            "index": index,
            "delta": delta,
            "finish_reason": finish,
            **engine,
        }
        line = data_line({**head, **first, "choices": [choice]})
        first = {}
        return line

    choices = answer.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        yield chunk(index, {"role": "assistant", "content": ""})
        for piece in _pieces(message.get("content")):
            yield chunk(index, {"content": piece})
        calls = message.get("tool_calls") or []
        if calls:
            indexed = [{"index": i, **call} for i, call in enumerate(calls)]
            yield chunk(index, {"tool_calls": indexed})
        for engine in _token_fields(choice):
            yield chunk(index, {}, **engine)
        stop = {"stop_reason": choice["stop_reason"]} if "stop_reason" in choice else {}
        yield chunk(index, {}, choice.get("finish_reason") or "stop", **stop)
    if include_usage:
        usage = answer.get("usage")
        if isinstance(usage, dict):  # null details are not streamed (vLLM leaves them out)
            usage = {k: v for k, v in usage.items() if v is not None}
        yield data_line({**head, "choices": [], "usage": usage})
    yield DONE


def _token_fields(choice: Mapping[str, object]) -> Iterator[dict[str, object]]:
    """A choice's ``token_ids`` and ``logprobs.content``, cut into aligned slices."""
    ids = choice.get("token_ids")
    ids = ids if isinstance(ids, list) else None
    found = choice.get("logprobs")
    logprobs = found.get("content") if isinstance(found, dict) else None
    logprobs = logprobs if isinstance(logprobs, list) else None
    size = max(len(ids or []), len(logprobs or []))
    for start in range(0, size, TOKENS_PER_CHUNK):
        end = start + TOKENS_PER_CHUNK
        fields: dict[str, object] = {}
        if ids is not None:
            fields["token_ids"] = ids[start:end]
        if logprobs is not None:
            fields["logprobs"] = {"content": logprobs[start:end]}
        yield fields


def _pieces(content: object) -> list[str]:
    """Text cut after each space, so the pieces join back to exactly the text."""
    if not isinstance(content, str) or not content:
        return []
    words = content.split(" ")
    return [word + " " for word in words[:-1]] + [words[-1]]


# --- Responses --------------------------------------------------------------------------------


class _Emit(Protocol):
    """Builds one numbered event of a Responses stream (``response_events``'s ``emit``)."""

    def __call__(self, kind: str, **fields: object) -> bytes: ...


def response_events(response: Mapping[str, object]) -> Iterator[bytes]:
    """The Responses API stream of a finished ``response`` object, in the API's order."""
    sequence = iter(range(1 << 30))

    def emit(kind: str, **fields: object) -> bytes:
        return event(kind, {"type": kind, "sequence_number": next(sequence), **fields})

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    yield emit("response.created", response=started)
    yield emit("response.in_progress", response=started)
    output = response.get("output")
    for index, item in enumerate(output if isinstance(output, list) else []):
        if item.get("type") == "message":
            yield from _message_events(emit, index, item)
        elif item.get("type") == "function_call":
            yield from _call_events(emit, index, item)
    kind = "response.completed" if response.get("status") == "completed" else "response.incomplete"
    yield emit(kind, response=response)


def _message_events(emit: _Emit, index: int, item: Mapping[str, object]) -> Iterator[bytes]:
    item_id = item["id"]
    yield emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    content = item.get("content")
    for part_index, part in enumerate(content if isinstance(content, list) else []):
        where = {"item_id": item_id, "output_index": index, "content_index": part_index}
        empty = {**part, "text": ""}
        yield emit("response.content_part.added", **where, part=empty)
        text = part.get("text", "")
        for piece in _pieces(text):
            yield emit("response.output_text.delta", **where, delta=piece, logprobs=[])
        yield emit("response.output_text.done", **where, text=text, logprobs=[])
        yield emit("response.content_part.done", **where, part=part)
    yield emit("response.output_item.done", output_index=index, item=item)


def _call_events(emit: _Emit, index: int, item: Mapping[str, object]) -> Iterator[bytes]:
    item_id = item["id"]
    yield emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "arguments": ""},
    )
    where = {"item_id": item_id, "output_index": index}
    arguments = item.get("arguments", "")
    yield emit("response.function_call_arguments.delta", **where, delta=arguments)
    yield emit(
        "response.function_call_arguments.done", **where, name=item.get("name"), arguments=arguments
    )
    yield emit("response.output_item.done", output_index=index, item=item)
