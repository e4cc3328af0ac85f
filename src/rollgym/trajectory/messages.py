"""When two chat messages are the same message, spelled differently.

An agent sends the model's answer back as the next request's history, but rarely byte for
byte: an OpenAI SDK agent that writes ``message.model_dump(exclude_none=True)`` drops every
null field the engine answered (``refusal``, ``audio``, ``function_call``, ``reasoning_content``)
and keeps an empty ``tool_calls`` list; another leaves ``tool_calls: []`` out. The trajectory
compares messages to find where each request's new part starts and which of several choices
the agent kept, so it compares them as what they mean: a field that is null or empty is the
same as a field that is absent, at any depth.
"""

from __future__ import annotations

from collections.abc import Mapping


def _meaning(value: object) -> object:
    """``value`` with every null or empty field of an object left out, at any depth."""
    if isinstance(value, Mapping):
        kept = {}
        for key, item in value.items():
            meant = _meaning(item)
            if meant is None or meant == [] or meant == {}:
                continue
            kept[key] = meant
        return kept
    if isinstance(value, list | tuple):
        return [_meaning(item) for item in value]
    return value


def same_message(left: object, right: object) -> bool:
    """Whether ``left`` and ``right`` are the same message (equal once null and empty fields
    are left out); anything that is not a message is compared as it is."""
    if left == right:
        return True
    if not isinstance(left, Mapping) or not isinstance(right, Mapping):
        return False
    return _meaning(left) == _meaning(right)
