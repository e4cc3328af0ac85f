"""The simulated policy model server: OpenAI-compatible, deterministic, cheap, GPU-free.

Answers chat completions (and legacy completions, vLLM-shaped) with text or tool calls from :mod:`policy`, ``usage`` (and, when
asked, vLLM's token ids and log-probabilities) from :mod:`toy_tokenizer`, ``id = "chatcmpl-<request id>"``, after a sampled latency (``asyncio.sleep``: no CPU
is burnt, so thousands of rollouts can be in flight). Everything random is seeded from a
stable hash (blake2b) of the request id, and "correct or not" from the rollout id, so a rerun
of the same rollout behaves the same and a whole episode is consistently right or wrong.
It emits the engine span ``llm_request`` (gate.model) with vLLM's attributes (held to a record
of a real vLLM by a test): time in queue (waiting for one of ``max_concurrent`` slots, like a
full batch), time to first token (the prefill share of the latency), end to end and vLLM's
model-time split, token counts under vLLM's names, and the request's sampling parameters.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import orjson

from rollgym.builtins.models import toy_tokenizer
from rollgym.builtins.models.options import Latency as Latency
from rollgym.builtins.models.options import SimulatedOptions
from rollgym.builtins.models.policy import decide
from rollgym.builtins.models.reply import Reply
from rollgym.builtins.models.schema_args import non_object_arguments
from rollgym.builtins.models.vllm_fields import with_vllm_fields
from rollgym.servers import (
    ChatRequest,
    CompletionRequest,
    HTTPError,
    ModelServer,
    ServerOptions,
    gate,
    policy_versions,
    server_timing,
)


def stable_seed(text: str) -> int:
    """A seed that is the same in every process and run (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(slots=True)
class EngineTimings:
    """What an engine measures about one generation (seconds)."""

    time_in_queue: float = 0.0
    time_to_first_token: float = 0.0
    e2e: float = 0.0


class SimulatedModel(ModelServer):
    """A deterministic fake policy behind the OpenAI chat completions API."""

    Options: ClassVar[type[ServerOptions]] = SimulatedOptions
    options: SimulatedOptions

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        slots = self.options.max_concurrent
        self._slots = asyncio.Semaphore(slots) if slots is not None else None
        self._arrivals = 0
        self._bumps = frozenset(self.options.bump_at)
        if self.options.bump_every is not None or self._bumps:
            self.policy_version = 0

    def served_version(self) -> policy_versions.PolicyVersion | None:
        """With ``bump_every`` / ``bump_at`` this engine plays the trainer: it moves its own
        version on as requests arrive (a driver's version still replaces it when set)."""
        arrival = self._arrivals
        self._arrivals += 1
        every = self.options.bump_every
        if (every is not None and arrival > 0 and arrival % every == 0) or arrival in self._bumps:
            current = self.policy_version
            self.policy_version = (current if isinstance(current, int) else 0) + 1
            self.policy_version_set_at = time.perf_counter()
        return self.policy_version

    async def load_weights(self, path: str) -> None:
        """The simulated engine has no weights to change: it checks that the checkpoint is
        there (an engine fails on a missing one, and the old weights keep serving) and the
        server records it (``GET /policy_version`` answers ``weights``)."""
        if not Path(path).exists():
            raise HTTPError(422, f"no checkpoint at {path}")

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, object]:
        request_id = request_id or uuid.uuid4().hex
        if gate.model:
            from rollgym.servers import spans

            with spans.engine_request_span(request_id, self.options.model_name, rollout_id) as span:
                spans.record_engine_request(
                    span,
                    temperature=request.temperature,
                    top_p=request.top_p,
                    max_tokens=request.token_limit,
                    n=request.n,
                )
                timings = EngineTimings()
                answer = await self._generate(request, request_id, rollout_id, timings)
                spans.record_engine_timings(span, timings, answer.get("usage"))
                return answer
        return await self._generate(request, request_id, rollout_id, EngineTimings())

    async def _generate(
        self,
        request: ChatRequest,
        request_id: str,
        rollout_id: str | None,
        timings: EngineTimings,
    ) -> dict[str, Any]:
        arrived = time.perf_counter()
        if self._slots is None:
            answer = await self._decode(request, request_id, rollout_id, timings, arrived)
        else:
            async with self._slots:
                answer = await self._decode(request, request_id, rollout_id, timings, arrived)
        # The engine's own time (its queue, prefill and decode), reported as a real engine's
        # is: the Server-Timing header carries it to the rollout's usage (engine_s).
        server_timing.note(server_timing.ENGINE, timings.e2e)
        return answer

    async def _decode(
        self,
        request: ChatRequest,
        request_id: str,
        rollout_id: str | None,
        timings: EngineTimings,
        arrived: float,
    ) -> dict[str, object]:
        options = self.options
        started = time.perf_counter()
        timings.time_in_queue = started - arrived
        rng = random.Random(stable_seed(request_id))
        correct = (
            random.Random(stable_seed(f"correct:{rollout_id or request_id}")).random()
            < options.accuracy
        )
        latency = options.latency.sample(rng)
        prefill = latency * options.prefill_share
        if prefill > 0:
            await asyncio.sleep(prefill)
        first_token = time.perf_counter()
        timings.time_to_first_token = first_token - arrived
        version_at_start = self.policy_version
        await asyncio.sleep(latency - prefill)
        replies = [
            _sampled_reply(request, correct, rng if index == 0 else _choice_rng(request_id, index))
            for index in range(request.n or 1)
        ]
        if options.tool_argument_mistakes > 0:
            replies = _with_argument_mistakes(replies, request_id, options.tool_argument_mistakes)
        timings.e2e = time.perf_counter() - arrived
        answer = completion(
            request_id, options.model_name, replies, token_limit=request.token_limit
        )
        # usage, token ids and log-probabilities from one tokenizer, so they always agree
        annotated = toy_tokenizer.annotate(
            answer,
            request.messages,
            request.tools,
            rng,
            token_ids=bool((request.model_extra or {}).get("return_token_ids")),
            logprobs=bool(request.logprobs),
            top_logprobs=request.top_logprobs or 0,
        )
        self._versions_of(annotated, version_at_start, first_token)
        return with_vllm_fields(annotated)

    def _versions_of(
        self,
        answer: dict[str, Any],
        at_start: policy_versions.PolicyVersion | None,
        first_token: float,
    ) -> None:
        """The engine's own version, and where a change landed mid-generation the token index
        (placed by time: the decode runs at an even pace), as vLLM's ``weight_versions``."""
        now = self.policy_version
        if now is None:
            return
        answer[policy_versions.ENGINE_KEY] = now
        if at_start is None or at_start == now:
            return
        usage = answer.get("usage") or {}
        tokens = int(usage.get("completion_tokens") or 0)
        ended = time.perf_counter()
        share = (self.policy_version_set_at - first_token) / max(ended - first_token, 1e-9)
        cut = min(tokens, max(0, round(tokens * share)))
        answer[policy_versions.TOKEN_SPANS_KEY] = [
            {"version": str(at_start), "start": 0, "end": cut},
            {"version": str(now), "start": cut, "end": tokens},
        ]

    async def complete_text(
        self, request: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """A legacy completion, as vLLM answers one (``cmpl-<request id>``, a ``text`` per
        choice, ``usage``): the policy plays the prompt as one user message. A token-id
        prompt cannot be read back by the toy tokenizer: the policy plays an empty message,
        and the usage counts the ids given."""
        text, id_count = _prompt_text(request.prompt)
        chat = ChatRequest.model_validate(
            {
                "messages": [{"role": "user", "content": text}],
                "return_token_ids": bool((request.model_extra or {}).get("return_token_ids")),
                "n": request.n,
                "max_tokens": request.max_tokens or None,
                "temperature": request.temperature,
                "top_p": request.top_p,
            }
        )
        request_id = request_id or uuid.uuid4().hex
        answer: dict[str, Any] = await self.complete(chat, request_id, rollout_id)
        usage = dict(answer.get("usage") or {})
        if id_count is not None:
            usage["prompt_tokens"] = id_count
            usage["total_tokens"] = id_count + int(usage.get("completion_tokens") or 0)
        token_ids = bool((request.model_extra or {}).get("return_token_ids"))
        return {
            "id": f"cmpl-{request_id}",
            "object": "text_completion",
            "created": answer.get("created"),
            "model": answer.get("model"),
            "choices": [
                {
                    "index": choice["index"],
                    "text": choice["message"].get("content") or "",
                    "logprobs": None,
                    "finish_reason": choice["finish_reason"],
                    "stop_reason": None,
                    "token_ids": choice.get("token_ids") if token_ids else None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "routed_experts": None,
                }
                for choice in answer["choices"]
            ],
            "service_tier": None,
            "system_fingerprint": answer.get("system_fingerprint"),
            "usage": usage,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    def model_names(self) -> list[str]:
        return [self.options.model_name]


def _choice_rng(request_id: str, index: int) -> random.Random:
    """The randomness of choice ``index`` (> 0) of a request with ``n`` > 1."""
    return random.Random(stable_seed(f"{request_id}#{index}"))


def _sampled_reply(request: ChatRequest, correct: bool, rng: random.Random) -> Reply:
    """The policy's reply under the request's ``tool_choice`` and ``temperature``.

    ``temperature: 0`` is greedy: every choice is the first one (the rng is not consulted
    beyond its seed). ``tool_choice: "none"`` hides the tools from the policy; ``"required"``
    or a named function turns a text reply into a call of that (or the first) tool.
    """
    if request.temperature == 0:
        rng = random.Random(0)
    tools = request.tools or []
    names_of = [str((t.get("function") or {}).get("name")) for t in tools]
    forced = request.forced_tool
    allowed = set() if forced == "none" else set(names_of)
    reply = decide(request.messages, allowed, correct, rng, tools)
    if forced in (None, "none") or not names_of:
        return reply
    wanted = names_of[0] if forced == "required" else forced
    if reply.tool_call is not None and (forced == "required" or reply.tool_call[0] == wanted):
        return reply
    schema = next((t.get("function") or {} for t in tools if _name(t) == wanted), {})
    return Reply(tool_call=(wanted, _arguments_for(schema, reply.content or "")))


def _with_argument_mistakes(replies: list[Reply], request_id: str, share: float) -> list[Reply]:
    """Each tool call's arguments, with probability ``share``, as JSON that is not an object
    (a randomness of its own: the knob off leaves every other draw as it was)."""
    rng = random.Random(stable_seed(f"tool-arguments:{request_id}"))
    return [
        replace(reply, arguments_text=non_object_arguments(rng))
        if reply.tool_call is not None and rng.random() < share
        else reply
        for reply in replies
    ]


def _name(tool: dict[str, Any]) -> str:
    return str((tool.get("function") or {}).get("name"))


def _arguments_for(function: dict[str, Any], text: str) -> dict[str, object]:
    """Arguments for a forced call: each required parameter gets the reply's text."""
    parameters = function.get("parameters") or {}
    return {name: text for name in parameters.get("required") or []}


def completion(
    request_id: str,
    model: str,
    replies: list[Reply],
    *,
    token_limit: int | None = None,
) -> dict[str, object]:
    """An OpenAI ``chat.completion`` object with one choice per reply (``usage``, token ids
    and log-probabilities are added by :func:`toy_tokenizer.annotate`)."""
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            _choice(request_id, index, reply, token_limit) for index, reply in enumerate(replies)
        ],
    }


def _choice(
    request_id: str, index: int, reply: Reply, token_limit: int | None
) -> dict[str, object]:
    """One choice. Past ``token_limit`` tokens (of the toy tokenizer) the text is cut there and
    ``finish_reason`` is ``length``; a tool call that does not fit becomes its cut text."""
    message: dict[str, object] = {"role": "assistant", "content": reply.content}
    finish_reason = "stop"
    if reply.tool_call is not None:
        name, arguments = reply.tool_call
        encoded = reply.arguments_text or orjson.dumps(arguments).decode()
        suffix = "" if index == 0 else f"-{index}"
        message["tool_calls"] = [
            {
                "id": f"call-{request_id}{suffix}",
                "type": "function",
                "function": {"name": name, "arguments": encoded},
            }
        ]
        finish_reason = "tool_calls"
    if token_limit is not None and len(toy_tokenizer.body_pieces(message)) > token_limit:
        text = reply.content if reply.tool_call is None else orjson.dumps(reply.tool_call).decode()
        cut = "".join(toy_tokenizer.pieces(text or "")[:token_limit])
        message = {"role": "assistant", "content": cut}
        finish_reason = "length"
    return {"index": index, "message": message, "finish_reason": finish_reason}


def _prompt_text(prompt: object) -> tuple[str, int | None]:
    """(the text the policy plays, the number of prompt token ids given, if ids); one prompt
    a request (a batch is refused with one line)."""
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return "", len(prompt)
    raise HTTPError(
        400,
        "the simulated model answers one prompt a request: 'prompt' must be a string or one "
        "list of token ids",
    )
