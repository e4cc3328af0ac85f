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
from collections.abc import Iterable
from typing import Any

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


def _tool_calls_text(tool_calls: Any) -> str:
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


def body_pieces(message: dict[str, Any]) -> list[str]:
    """The tokens of a message's body: its text, then its tool calls, then the end token."""
    return [
        *pieces(content_text(message.get("content")) + _tool_calls_text(message.get("tool_calls"))),
        IM_END,
    ]


def message_pieces(message: dict[str, Any]) -> list[str]:
    """One message in the template: ``<|im_start|>role\\n body <|im_end|>\\n``."""
    role = str(message.get("role", "user"))
    return [IM_START, *pieces(role + "\n"), *body_pieces(message), "\n"]


def prompt_pieces(
    messages: Iterable[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[str]:
    """The whole prompt: the tools (if any), every message, then the generation prompt."""
    out: list[str] = []
    if tools:
        out += [TOOLS, *pieces(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()), "\n"]
    for message in messages:
        out += message_pieces(message)
    return [*out, IM_START, *pieces("assistant\n")]


def _logprob_entry(piece: str, logprob: float) -> dict[str, Any]:
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}


def _logprobs(generated: list[str], top: int, rng: random.Random) -> list[dict[str, Any]]:
    """Per generated token: its log-probability and ``top`` alternatives, all consistent:
    the chosen token is the most likely one and the probabilities sum to at most 1."""
    content = []
    for piece in generated:
        chosen = 0.5 + 0.5 * rng.random()
        alternatives = [_logprob_entry(piece, math.log(chosen))]
        for rank in range(1, top):
            other = f"{piece}~{rank}"
            alternatives.append(_logprob_entry(other, math.log((1 - chosen) / 2**rank)))
        content.append({**alternatives[0], "top_logprobs": alternatives[:top]})
    return content


def generated_pieces(choice: dict[str, Any]) -> list[str]:
    """The tokens a choice generated: its body and end token, or, cut by ``max_tokens``
    (``finish_reason: length``), only the text it got to (no end token)."""
    message = choice["message"]
    if choice.get("finish_reason") == "length":
        return list(pieces(content_text(message.get("content"))))
    return body_pieces(message)


def annotate(
    answer: dict[str, Any],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    rng: random.Random,
    *,
    token_ids: bool = False,
    logprobs: bool = False,
    top_logprobs: int = 0,
) -> dict[str, Any]:
    """Set ``usage`` from the tokens of the prompt and of every choice, and the engine fields
    the request asked for (``return_token_ids``, ``logprobs``, ``top_logprobs``). Returns
    ``answer``, changed in place."""
    prompt = prompt_pieces(messages, tools)
    generated = 0
    top = max(0, min(top_logprobs, MAX_TOP_LOGPROBS))
    for choice in answer["choices"]:
        tokens = generated_pieces(choice)
        generated += len(tokens)
        if token_ids:
            choice["token_ids"] = [token_id(p) for p in tokens]
        if logprobs:
            choice["logprobs"] = {"content": _logprobs(tokens, top, rng)}
    if token_ids:
        answer["prompt_token_ids"] = [token_id(p) for p in prompt]
    answer["usage"] = {
        "prompt_tokens": len(prompt),
        "completion_tokens": generated,
        "total_tokens": len(prompt) + generated,
    }
    return answer
