"""The fields vLLM's OpenAI server puts on every chat completion, for the simulated model.

vLLM (0.32) answers each of these on every chat completion, almost always as null: OpenAI's
optional message fields (``refusal``, ``annotations``, ``audio``, ``function_call``), its
reasoning text, its own engine extras (``stop_reason``: the stop string or token that ended a
choice; ``prompt_text``, ``prompt_logprobs``, ``kv_transfer_params``...), the usage details and a
``system_fingerprint``. The simulated model adds them with vLLM's values for a plain
generation, so a client that reads one (or trips over one) meets it in tests as it will
against vLLM. ``tests/unit/servers/vllm_shape.json`` is the record of a real vLLM's keys that
a test holds the simulated answers to.
"""

from __future__ import annotations

from typing import Any

#: ``system_fingerprint``: vLLM sends ``vllm-<version>-<hash>``; this names the simulation.
SYSTEM_FINGERPRINT = "rollgym-simulated"

_ANSWER: dict[str, str | None] = {
    "service_tier": None,
    "system_fingerprint": SYSTEM_FINGERPRINT,
    "prompt_logprobs": None,
    "prompt_text": None,
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "metrics": None,
}
_CHOICE: dict[str, None] = {"stop_reason": None, "routed_experts": None}
_MESSAGE: dict[str, None] = {
    "refusal": None,
    "annotations": None,
    "audio": None,
    "function_call": None,
    "reasoning": None,
}
_USAGE: dict[str, None] = {"prompt_tokens_details": None, "completion_tokens_details": None}


def with_vllm_fields(answer: dict[str, Any]) -> dict[str, object]:
    """``answer`` (a ``chat.completion``) with vLLM's extra fields where it has none (in place)."""
    for key, value in _ANSWER.items():
        answer.setdefault(key, value)
    for choice in answer.get("choices") or []:
        for key, value in _CHOICE.items():
            choice.setdefault(key, value)
        message = choice.get("message")
        if isinstance(message, dict):
            for key, value in _MESSAGE.items():
                message.setdefault(key, value)
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key, value in _USAGE.items():
            usage.setdefault(key, value)
    return answer
