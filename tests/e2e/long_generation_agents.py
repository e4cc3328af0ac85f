"""An agent whose one model call is a long generation: for the tests of what happens at the
engine when a rollout ends before its generation does."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from rollgym.servers import Agent, AgentOptions, RolloutContext, ServerOptions


class LongOptions(AgentOptions):
    max_tokens: int = Field(1800, ge=1, description="Tokens to generate (never stopping early).")
    stream: bool = Field(False, description="Ask for the answer as a stream.")


class LongGenerationAgent(Agent):
    """One chat call through the rollout's scoped model URL with ``ignore_eos`` and a large
    ``max_tokens`` (vLLM's keys), so the generation outlasts the rollout's time limit."""

    Options: ClassVar[type[ServerOptions]] = LongOptions
    options: LongOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        options = self.options
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": str(row.get("question", "count"))}],
            "max_tokens": options.max_tokens,
            "ignore_eos": True,
            "stream": options.stream,
        }
        url = rollout.model_base_url + "/chat/completions"
        if options.stream:
            async with self.client.stream("policy", url, body) as streamed:
                async for _ in streamed.content:
                    pass
            return {"reward": 1.0}
        answer = await self.client.post_json("policy", url, body, timeout=None)
        return {"reward": 1.0 if answer.status == 200 else 0.0}
