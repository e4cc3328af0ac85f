"""Whether a model call's answer is whole: the one judgement the trajectory, the usage and the
SDK transport share.

Why it matters: a trainer takes a recorded answer as what the policy produced. An answer that
was cut short looks like a short answer, and a short answer looks like a wrong one (reward 0),
so it must never pass as complete. llama.cpp's server, for one, ends a stream it interrupts
(another request arrived, its default ``interrupt_requests``) with ``data: [DONE]`` and no
finish reason. An answer is incomplete when:

* ``stream_cut``: a stream ended before ``data: [DONE]`` (the connection closed, the agent
  stopped reading);
* ``stream_damaged``: an event of a chat stream was not a JSON object (a broken gateway, a
  truncated write): whatever it carried is missing from the joined answer, even when
  ``[DONE]`` and a finish reason followed;
* ``stream_error``: the engine sent an error event in the stream (vLLM's ``{"error": ...}``),
  which the SDK raises to the agent, however the stream went on;
* ``no_finish_reason``: a choice has no finish reason, or there is no choice at all (what a
  whole answer always has; the interrupted llama.cpp stream is this one);
* ``usage_mismatch``: the engine's usage disagrees with the tokens that arrived (its
  ``completion_tokens`` against the ``token_ids`` of every choice, its ``prompt_tokens``
  against ``prompt_token_ids``), counted only where the engine answered token ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: The key a joined answer and a trajectory turn carry the reason under.
INCOMPLETE: Final = "incomplete"
#: The older marker of a stream that ended before ``[DONE]`` (kept on the turn as it was).
STREAM_INCOMPLETE: Final = "stream_incomplete"

STREAM_CUT: Final = "stream_cut"
STREAM_DAMAGED: Final = "stream_damaged"
STREAM_ERROR: Final = "stream_error"
NO_FINISH_REASON: Final = "no_finish_reason"
USAGE_MISMATCH: Final = "usage_mismatch"


def incomplete_reason(answer: Mapping[str, object]) -> str | None:
    """Why ``answer`` (a ``chat.completion``, joined or not) is not whole; None when it is."""
    said = answer.get(INCOMPLETE)
    if isinstance(said, str) and said:
        return said
    if answer.get(STREAM_INCOMPLETE):
        return STREAM_CUT
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        return NO_FINISH_REASON
    for choice in choices:
        if not isinstance(choice, Mapping) or choice.get("finish_reason") is None:
            return NO_FINISH_REASON
    if _usage_disagrees(answer, choices):
        return USAGE_MISMATCH
    return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage_disagrees(answer: Mapping[str, object], choices: list[object]) -> bool:
    usage = answer.get("usage")
    if not isinstance(usage, Mapping):
        return False
    completion = _count(usage.get("completion_tokens"))
    ids = [c.get("token_ids") for c in choices if isinstance(c, Mapping)]
    whole_ids = bool(ids) and all(isinstance(i, list) for i in ids)
    if completion is not None and whole_ids:
        arrived = sum(len(i) for i in ids if isinstance(i, list))
        if completion != arrived:
            return True
    prompt = _count(usage.get("prompt_tokens"))
    prompt_ids = answer.get("prompt_token_ids")
    return prompt is not None and isinstance(prompt_ids, list) and prompt != len(prompt_ids)
