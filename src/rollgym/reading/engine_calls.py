"""What the engine itself recorded of each model call: the token counts of its own spans.

vLLM exports one ``llm_request`` span per request it served (one per sub-request of an
``n > 1`` call), with ``gen_ai.request.id`` (the id the model server sent, decorated: see
:mod:`~rollgym.reading.engine_ids`) and its own ``gen_ai.usage.prompt_tokens`` /
``gen_ai.usage.completion_tokens``. ``traces check --data`` holds every trajectory's turn
against that record; this module reads it out of the store, keyed by the id as it was sent
(``3-0.2``, or the UUID sent in its place), so a turn finds its engine span by its request id.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from rollgym.reading.engine_ids import sent_request_id, sub_request_index
from rollgym.telemetry import names


class EngineCall(NamedTuple):
    """One model call as the engine counted it (None: its spans did not say)."""

    prompt_tokens: int | None
    #: Summed over the sub-requests of an ``n > 1`` call (each generated its own choice).
    completion_tokens: int | None
    #: How many engine spans named this call (sub-requests included).
    spans: int


_QUERY = (
    "SELECT json_extract(attributes, ?), json_extract(attributes, ?), "
    "json_extract(attributes, ?) FROM spans WHERE instr(attributes, ?) > 0 ORDER BY start_ns"
)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def engine_calls(conn: sqlite3.Connection) -> dict[str, EngineCall]:
    """``{id as sent: EngineCall}`` for every engine span in the store.

    Sub-requests of one call (``0_chatcmpl-…``, ``1_chatcmpl-…``) are one call: the prompt
    is the same, the completions add up. Where the same (sub-)request id was served twice
    (an upstream retry), the later span is the one whose answer came back."""
    parts: dict[str, dict[int | None, tuple[int | None, int | None]]] = {}
    spans: dict[str, int] = {}
    for engine_id, prompt, completion in conn.execute(
        _QUERY,
        (
            f'$."{names.GEN_AI_REQUEST_ID}"',
            f'$."{names.GEN_AI_USAGE_PROMPT_TOKENS}"',
            f'$."{names.GEN_AI_USAGE_COMPLETION_TOKENS}"',
            names.GEN_AI_REQUEST_ID,
        ),
    ):
        if not isinstance(engine_id, str) or not engine_id:
            continue
        sent = sent_request_id(engine_id)
        parts.setdefault(sent, {})[sub_request_index(engine_id)] = (
            _count(prompt),
            _count(completion),
        )
        spans[sent] = spans.get(sent, 0) + 1
    calls: dict[str, EngineCall] = {}
    for sent, subs in parts.items():
        prompts = [p for p, _ in subs.values() if p is not None]
        completions = [c for _, c in subs.values()]
        calls[sent] = EngineCall(
            prompt_tokens=max(prompts) if prompts else None,
            completion_tokens=None if None in completions else sum(c or 0 for c in completions),
            spans=spans[sent],
        )
    return calls
