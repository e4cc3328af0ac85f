"""A deterministic toy tokenizer and chat template for the simulated model.

Real engines (vLLM) answer token ids and log-probabilities from their own tokenizer; the
simulated model needs the same fields with the same guarantees, so trajectories collected on
it exercise a trainer's code path for real: ids, log-probabilities and ``usage`` agree with each
other, and a multi-turn conversation's prompt extends the previous prompt + completion token for
token (the template renders each message on its own, so nothing earlier is ever re-tokenized).

Tokens are pieces of text (a run of letters, up to three digits, one other character, each
with the whitespace before it); an id is a stable hash of the piece, so any process gets the
same ids. Special tokens have fixed small ids. :func:`annotate` adds the engine fields to a
``chat.completion`` with vLLM's names: request ``return_token_ids`` -> top-level
``prompt_token_ids`` and per-choice ``token_ids``; request ``logprobs`` / ``top_logprobs`` ->
``choices[].logprobs.content[].{token, logprob, bytes, top_logprobs}`` (the OpenAI shape).
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from rollgym.servers import content_text

VOCAB_SIZE = 50_000
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOLS = "<|tools|>"
#: Special tokens: never split, fixed ids below the hashed range.
SPECIAL_IDS = {IM_START: 1, IM_END: 2, TOOLS: 3}
_FIRST_HASHED_ID = 16
_PIECE = re.compile(r"\s*[A-Za-z]+|\s*\d{1,3}|\s*[^\sA-Za-z\d]|\s+")
#: The most alternatives a ``top_logprobs`` request gets (OpenAI's limit).
MAX_TOP_LOGPROBS = 20


@functools.lru_cache(maxsize=8192)
def pieces(text: str) -> tuple[str, ...]:
    """Split text into token strings; ``"".join(pieces(t)) == t`` always.

    Cached: a conversation sends the same texts (system prompt, tools, earlier turns) on every
    turn, and the cache keeps the simulated engine's per-call cost near its new text only."""
    return tuple(_PIECE.findall(text))


@functools.lru_cache(maxsize=65536)
def token_id(piece: str) -> int:
    """The id of one token string: fixed for special tokens, a stable hash otherwise."""
    special = SPECIAL_IDS.get(piece)
    if special is not None:
        return special
    digest = hashlib.blake2b(piece.encode(), digest_size=4).digest()
    return _FIRST_HASHED_ID + int.from_bytes(digest, "big") % (VOCAB_SIZE - _FIRST_HASHED_ID)


def _tool_calls_text(tool_calls: object) -> str:
    """Tool calls as the model "wrote" them; the arguments string is kept verbatim."""
    if not isinstance(tool_calls, list):
        return ""
    out = []
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = orjson.dumps(str(function.get("name", ""))).decode()
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        out.append(f'<tool_call>{{"name": {name}, "arguments": {arguments}}}</tool_call>')
    return "".join(out)


class _Special(NamedTuple):
    """Special tokens in the template: never split, ids fixed."""

    pieces: tuple[str, ...]
    ids: tuple[int, ...]


def _special(piece: str) -> _Special:
    return _Special((piece,), (SPECIAL_IDS[piece],))


#: A piece of the template: a text (tokenized on its own) or special tokens.
Segment = str | _Special
_START = _special(IM_START)
_END = _special(IM_END)
_TOOLS = _special(TOOLS)


@functools.lru_cache(maxsize=8192)
def text_ids(text: str) -> tuple[int, ...]:
    """The ids of a text's tokens. Cached per text like :func:`pieces`: a prompt's ids are
    its segments' cached tuples joined, not one lookup per token."""
    return tuple(token_id(p) for p in pieces(text))


def _body_segments(message: Mapping[str, object]) -> list[Segment]:
    return [
        content_text(message.get("content")) + _tool_calls_text(message.get("tool_calls")),
        _END,
    ]


def _prompt_segments(
    messages: Iterable[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None
) -> list[Segment]:
    """The template: the tools (if any); each message as ``<|im_start|>role\n body
    <|im_end|>\n``; then the generation prompt ``<|im_start|>assistant\n``."""
    out: list[Segment] = []
    if tools:
        out += [_TOOLS, orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode(), "\n"]
    for message in messages:
        out += [_START, str(message.get("role", "user")) + "\n", *_body_segments(message), "\n"]
    return [*out, _START, "assistant\n"]


def _generated_segments(choice: dict[str, Any]) -> list[Segment]:
    """What a choice generated: its body and end token, or, cut by ``max_tokens``
    (``finish_reason: length``), only the text it got to (no end token)."""
    message = choice["message"]
    if choice.get("finish_reason") == "length":
        return [content_text(message.get("content"))]
    return _body_segments(message)


def _flat_pieces(segments: list[Segment]) -> list[str]:
    out: list[str] = []
    for segment in segments:
        out += segment.pieces if type(segment) is _Special else pieces(segment)
    return out


def _flat_ids(segments: list[Segment]) -> list[int]:
    ids: list[int] = []
    for segment in segments:
        ids += segment.ids if type(segment) is _Special else text_ids(segment)
    return ids


def body_pieces(message: Mapping[str, object]) -> list[str]:
    """The tokens of a message's body: its text, then its tool calls, then the end token."""
    return _flat_pieces(_body_segments(message))


def prompt_pieces(
    messages: Iterable[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None
) -> list[str]:
    """The whole prompt: the tools (if any), every message, then the generation prompt."""
    return _flat_pieces(_prompt_segments(messages, tools))


def generated_pieces(choice: dict[str, Any]) -> list[str]:
    """The tokens a choice generated (see :func:`_generated_segments`)."""
    return _flat_pieces(_generated_segments(choice))


@functools.lru_cache(maxsize=65536)
def _piece_bytes(piece: str) -> list[int]:
    """A token's UTF-8 bytes (one shared list per token: answers are only serialized)."""
    return list(piece.encode())


def _logprobs(generated: list[str], top: int, rng: random.Random) -> list[dict[str, object]]:
    """Per generated token: its log-probability and ``top`` alternatives, all consistent:
    the chosen token is the most likely one and the probabilities sum to at most 1."""
    content = []
    log = math.log
    for piece in generated:
        chosen = 0.5 + 0.5 * rng.random()
        logprob = log(chosen)
        alternatives = []
        if top:
            alternatives.append({"token": piece, "logprob": logprob, "bytes": _piece_bytes(piece)})
            for rank in range(1, top):
                other = f"{piece}~{rank}"
                alternatives.append(
                    {
                        "token": other,
                        "logprob": log((1 - chosen) / 2**rank),
                        "bytes": list(other.encode()),
                    }
                )
        content.append(
            {
                "token": piece,
                "logprob": logprob,
                "bytes": _piece_bytes(piece),
                "top_logprobs": alternatives,
            }
        )
    return content


def annotate(
    answer: dict[str, Any],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    rng: random.Random,
    *,
    token_ids: bool = False,
    logprobs: bool = False,
    top_logprobs: int = 0,
) -> dict[str, object]:
    """Set ``usage`` from the tokens of the prompt and of every choice, and the engine fields
    the request asked for (``return_token_ids``, ``logprobs``, ``top_logprobs``). Returns
    ``answer``, changed in place."""
    prompt = _prompt_segments(messages, tools)
    generated = 0
    top = max(0, min(top_logprobs, MAX_TOP_LOGPROBS))
    for choice in answer["choices"]:
        segments = _generated_segments(choice)
        ids = _flat_ids(segments)
        generated += len(ids)
        if token_ids:
            choice["token_ids"] = ids
        if logprobs:
            choice["logprobs"] = {"content": _logprobs(_flat_pieces(segments), top, rng)}
    prompt_ids = _flat_ids(prompt)
    if token_ids:
        answer["prompt_token_ids"] = prompt_ids
    answer["usage"] = {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": generated,
        "total_tokens": len(prompt_ids) + generated,
    }
    return answer
