"""A conversation read from spans, for runs that kept no trajectory.

rollgym's own spans carry no message text (``run.trajectories: true`` is where text is kept),
but an agent instrumented with the OpenTelemetry GenAI conventions may record it on its model
spans: the ``gen_ai.input.messages`` / ``gen_ai.output.messages`` attributes (JSON), or the
older per-message events (``gen_ai.user.message``, ``gen_ai.choice``, ...). This module reads
those into the same entries :mod:`rollgym.trajectory.conversation` builds, so the viewer
shows one view whichever was recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from rollgym.json_types import JsonObject
from rollgym.reading.query_rows import SpanRow
from rollgym.telemetry import names

INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _json_list(value: object) -> list[JsonObject]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return []
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _text(message: Mapping[str, object]) -> str | None:
    """The text of a message in either shape: ``content`` or the newer ``parts``."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") if isinstance(message.get("parts"), list) else content
    if isinstance(parts, list):
        texts = [p.get("content") or p.get("text") for p in parts if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str)) or None
    return None


def _event_messages(span: Mapping[str, object]) -> tuple[list[JsonObject], list[JsonObject]]:
    inputs: list[JsonObject] = []
    outputs: list[JsonObject] = []
    events = span.get("events")
    for event in events if isinstance(events, list) else []:
        attributes = event.get("attributes") or {}
        name = event.get("name")
        body = attributes.get("content", attributes.get("gen_ai.event.content"))
        if name in _EVENT_ROLES:
            inputs.append({"role": _EVENT_ROLES[name], "content": body})
        elif name == "gen_ai.choice":
            message = attributes.get("message")
            parsed = _json_list(f"[{message}]") if isinstance(message, str) else []
            outputs.append(parsed[0] if parsed else {"role": "assistant", "content": body})
    return inputs, outputs


def recorded_conversation(spans: Sequence[SpanRow]) -> list[dict[str, object]]:
    """Entries (``message`` and ``answer``) from the model spans that recorded messages, in
    order; each call's new input messages only (a call repeats the ones before it)."""
    entries: list[dict[str, object]] = []
    seen = 0
    calls = 0
    for span in sorted(spans, key=lambda s: s["start_ns"]):
        attributes = span.get("attributes") or {}
        inputs = _json_list(attributes.get(INPUT_MESSAGES))
        outputs = _json_list(attributes.get(OUTPUT_MESSAGES))
        if not inputs and not outputs:
            inputs, outputs = _event_messages(span)
        if not inputs and not outputs:
            continue
        for message in inputs[seen:] if len(inputs) >= seen else inputs:
            entries.append(
                {
                    "kind": "message",
                    "role": str(message.get("role", "?")),
                    "content": _text(message),
                }
            )
        seen = len(inputs) + len(outputs)
        for message in outputs:
            entries.append(
                {
                    "kind": "answer",
                    "role": str(message.get("role", "assistant")),
                    "content": _text(message),
                    "call": calls,
                    "input_tokens": attributes.get(names.GEN_AI_USAGE_INPUT_TOKENS),
                    "output_tokens": attributes.get(names.GEN_AI_USAGE_OUTPUT_TOKENS),
                    "finish_reason": message.get("finish_reason"),
                    "latency_ms": span.get("duration_ms"),
                }
            )
        calls += 1
    return entries
