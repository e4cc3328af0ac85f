"""What recording a trajectory adds per rollout in flight, as tool outputs grow.

Plays ``--rollouts`` tool-loop rollouts of ``--turns`` turns at once in one process, the way
an agent holds them: each turn a chat completion, then a tool call whose output is a fresh
text of S bytes that the next request carries. It measures, with ``tracemalloc``, the memory
held with every rollout still in flight, once without recorders (the agent's own
conversations) and once with one :class:`TrajectoryRecorder` per rollout; the difference per
rollout is what recording holds. Then the bytes of each trajectory as it travels (the
``/run`` answer the driver parses and writes as one ``trajectories.jsonl`` line).

For each S (``capture: turns``) it compares the default ``tool_output_max_bytes`` (64 KiB)
with no cap. Token ids are bounded by the engine's context, not by the cap, so they are
measured apart (``capture: tokens``, 1 KiB outputs): memory and bytes per token. Their ids
are synthetic (4 bytes of text a token, as real tokenizers average); the recorder sees what
an engine would answer.

    python bench/trajectory_memory.py [--rollouts 16] [--turns 6]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from typing import Any

import orjson

from rollgym.trajectory.record import TOOL_OUTPUT_MAX_BYTES, Capture, TrajectoryRecorder

SIZES = (1024, 16 * 1024, 256 * 1024, 1024 * 1024)
NO_CAP = 1 << 62
SYSTEM = {"role": "system", "content": "Follow the chain of keys and answer with the last."}


def _answer(prompt_len: int, turn: int) -> dict[str, Any]:
    completion = list(range(1000 + turn, 1040 + turn))
    return {
        "id": f"chatcmpl-{turn}",
        "prompt_token_ids": list(range(16, 16 + prompt_len)),
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call-{turn}",
                            "type": "function",
                            "function": {"name": "read_key", "arguments": '{"key": "k"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
                "token_ids": completion,
                "logprobs": {"content": [{"token": "t", "logprob": -0.25} for _ in completion]},
            }
        ],
        "usage": {"prompt_tokens": prompt_len, "completion_tokens": len(completion)},
    }


def _play(
    rollouts: int, turns: int, size: int, cap: int | None, capture: Capture = "turns"
) -> tuple[float, float, int]:
    """Memory held with all rollouts in flight (bytes per rollout), trajectory bytes each,
    and the tokens of one rollout's last prompt + completion."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    conversations = []
    recorders = []
    for index in range(rollouts):
        recorder = TrajectoryRecorder(capture, tool_output_max_bytes=cap) if cap else None
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"start {index}"}]
        prompt_len = 40
        for turn in range(turns):
            answer = _answer(prompt_len, turn)
            if recorder is not None:
                recorder.model_call({"messages": messages, "logprobs": True}, answer)
            output = f"{index}.{turn}:" + "x" * size  # a fresh text, as an environment answers
            if recorder is not None:
                recorder.tool_call("read_key", {"key": "k"}, output)
            message = answer["choices"][0]["message"]
            tool = {"role": "tool", "tool_call_id": f"call-{turn}", "content": output}
            messages = [*messages, message, tool]
            prompt_len += 40 + 8 + size // 4
        conversations.append(messages)
        recorders.append(recorder)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    line_bytes = sum(len(orjson.dumps(r.to_json())) for r in recorders if r is not None)
    del conversations, recorders
    return held / rollouts, line_bytes / rollouts, prompt_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts in flight at once")
    parser.add_argument("--turns", type=int, default=6, help="model + tool turns per rollout")
    args = parser.parse_args()
    rollouts, turns = args.rollouts, args.turns
    print(
        f"{rollouts} rollouts in flight, {turns} turns each (capture: turns); per rollout: "
        f"memory recording adds (tracemalloc), trajectory bytes"
    )
    print(
        f"{'tool output':>12} | {'cap 64 KiB: memory':>19} {'bytes':>10} | "
        f"{'no cap: memory':>15} {'bytes':>10}"
    )
    for size in SIZES:
        agent_only, _, _ = _play(rollouts, turns, size, None)
        capped, capped_bytes, _ = _play(rollouts, turns, size, TOOL_OUTPUT_MAX_BYTES)
        uncapped, uncapped_bytes, _ = _play(rollouts, turns, size, NO_CAP)
        print(
            f"{size / 1024:>9,.0f} KiB | {(capped - agent_only) / 1024:>15,.0f} KiB "
            f"{capped_bytes / 1024:>6,.0f} KiB | {(uncapped - agent_only) / 1024:>11,.0f} KiB "
            f"{uncapped_bytes / 1024:>6,.0f} KiB"
        )
    bound = turns * 2 * TOOL_OUTPUT_MAX_BYTES / 1024
    print(f"capped: texts kept per rollout <= turns x 2 x 64 KiB = {bound:,.0f} KiB")
    turns_only, turns_bytes, _ = _play(rollouts, turns, 1024, TOOL_OUTPUT_MAX_BYTES)
    tokens, tokens_bytes, count = _play(rollouts, turns, 1024, TOOL_OUTPUT_MAX_BYTES, "tokens")
    print(
        f"capture: tokens, {count:,} tokens a rollout: {(tokens - turns_only) / count:.1f} bytes "
        f"of memory and {(tokens_bytes - turns_bytes) / count:.1f} bytes of trajectory a token"
    )


if __name__ == "__main__":
    main()
