"""The simulated policy model server: OpenAI-compatible, deterministic, cheap, GPU-free.

Answers chat completions with text or tool calls from :mod:`policy`, ``usage`` (and, when
asked, vLLM's token ids and log-probabilities) from :mod:`toy_tokenizer`, ``id = "chatcmpl-<request id>"``, after a sampled latency (``asyncio.sleep``: no CPU
is burnt, so thousands of rollouts can be in flight). Everything random is seeded from a
stable hash (blake2b) of the request id, and "correct or not" from the rollout id, so a rerun
of the same rollout behaves the same and a whole episode is consistently right or wrong.
It emits the engine span ``llm_request`` (gate.model), named like vLLM's, with the latency
attributes an engine reports: time in queue (waiting for one of ``max_concurrent`` slots,
like a full batch), time to first token (the prefill share of the latency) and end to end.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from rollgym.builtins.models import toy_tokenizer
from rollgym.builtins.models.policy import Reply, decide
from rollgym.config import ServerOptions
from rollgym.servers.model import ChatRequest, ModelServer
from rollgym.telemetry.groups import gate


class Latency(BaseModel):
    """How long one generation takes: ``fixed`` (seconds), ``uniform`` (low..high) or
    ``lognormal`` (median seconds, sigma)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    seconds: float = Field(0.02, ge=0, description="fixed: the value; lognormal: the median.")
    low: float = Field(0.0, ge=0, description="uniform: the lower bound.")
    high: float = Field(0.05, ge=0, description="uniform: the upper bound.")
    sigma: float = Field(0.5, ge=0, description="lognormal: spread of log(latency).")

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.seconds
        if self.kind == "uniform":
            return rng.uniform(self.low, max(self.low, self.high))
        if self.seconds <= 0:
            return 0.0
        return rng.lognormvariate(math.log(self.seconds), self.sigma)


class SimulatedOptions(ServerOptions):
    accuracy: float = Field(
        0.8, ge=0, le=1, description="Probability that a rollout is played correctly."
    )
    latency: Latency = Field(default_factory=Latency)
    model_name: str = Field("rollgym-simulated", description="The 'model' of answers and spans.")
    max_concurrent: int | None = Field(
        None,
        ge=1,
        description="Generations at once, like an engine's batch slots; others queue. "
        "None: no limit.",
    )
    prefill_share: float = Field(
        0.25, ge=0, le=1, description="Share of the latency before the first token."
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        slots = self.sim_options.max_concurrent
        self._slots = asyncio.Semaphore(slots) if slots is not None else None

    @property
    def sim_options(self) -> SimulatedOptions:
        assert isinstance(self.options, SimulatedOptions)
        return self.options

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        request_id = request_id or uuid.uuid4().hex
        if gate.model:
            from rollgym.telemetry import spans

            with spans.engine_request_span(
                request_id, self.sim_options.model_name, rollout_id
            ) as span:
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
            return await self._decode(request, request_id, rollout_id, timings, arrived)
        async with self._slots:
            return await self._decode(request, request_id, rollout_id, timings, arrived)

    async def _decode(
        self,
        request: ChatRequest,
        request_id: str,
        rollout_id: str | None,
        timings: EngineTimings,
        arrived: float,
    ) -> dict[str, Any]:
        options = self.sim_options
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
        timings.time_to_first_token = time.perf_counter() - arrived
        await asyncio.sleep(latency - prefill)
        tool_names = {str((t.get("function") or {}).get("name")) for t in request.tools or []}
        reply = decide(request.messages, tool_names, correct, rng)
        timings.e2e = time.perf_counter() - arrived
        answer = completion(request_id, options.model_name, reply)
        # usage, token ids and log-probabilities from one tokenizer, so they always agree
        return toy_tokenizer.annotate(
            answer, request.messages, request.tools, request.model_extra or {}, rng
        )


def completion(request_id: str, model: str, reply: Reply) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object for one reply (``usage`` is added by
    :func:`toy_tokenizer.annotate`)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    finish_reason = "stop"
    if reply.tool_call is not None:
        name, arguments = reply.tool_call
        encoded = orjson.dumps(arguments).decode()
        message["tool_calls"] = [
            {
                "id": f"call-{request_id}",
                "type": "function",
                "function": {"name": name, "arguments": encoded},
            }
        ]
        finish_reason = "tool_calls"
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
