"""Which rollout an engine's request id names: how ``rollgym traces check`` attributes an
engine span (vLLM's ``llm_request``), which carries no ``gym.rollout.id`` of its own.

Every model call of a rollout goes upstream with ``X-Request-Id: <rollout id>.<turn>``, and
vLLM builds its request id from that header: ``chatcmpl-<id>`` (chat), ``cmpl-<id>``
(completions, ``cmpl-<id>-<i>`` per prompt of a batch), ``resp_<id>_<n>`` (responses, whose
id the proxy sends in the body as ``resp_<id>``), a
``<n>_`` prefix on the sub-requests of parallel sampling, and in recent versions a random
``-<hex>`` suffix on its internal id. Its span attribute ``gen_ai.request.id`` holds one of
these. Where an upstream policy sent another id (a UUID derived from ``<rollout id>.<turn>``),
the model span records the id it sent (``gym.model.upstream_request_id``) beside
``gym.rollout.id``, and that mapping is consulted first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rollgym.identity import rollout_of_request_id

#: Prefixes vLLM's OpenAI server puts before the request id (chat, completions, responses...).
_ENGINE_PREFIXES = ("chatcmpl-", "cmpl-", "resp_", "resp-", "embd-", "score-", "classify-")
_SUB_REQUEST = re.compile(r"\d+_")
#: A ``-<alnum>`` suffix an engine appended after the ``<turn>`` of ``<rollout id>.<turn>``.
_ENGINE_SUFFIX = re.compile(r"(\.\d+)-[0-9A-Za-z]+$")
#: vLLM's ``_<n>`` sub-request suffix on a Responses call's id (``resp_<id>_0``), after the
#: ``<turn>`` or after a sent UUID (whose last group is 12 hex digits).
_RESPONSES_SUB = re.compile(r"(\.\d+|[0-9a-f]{12})_\d+$")


def strip_engine_decorations(engine_id: str) -> str:
    """``"0_chatcmpl-3-0.2"`` -> ``"3-0.2"``: the id as it was sent, without vLLM's prefixes."""
    return _undecorated(engine_id)[0]


def _undecorated(engine_id: str) -> tuple[str, int | None]:
    """The id without vLLM's prefixes, and the index of its ``<k>_`` sub-request prefix."""
    text = engine_id
    index = None
    for _ in range(2):  # a sub-request prefix may sit outside or inside the API prefix
        sub = _SUB_REQUEST.match(text)
        if sub is not None:
            index = int(text[: sub.end() - 1])
            text = text[sub.end() :]
        for prefix in _ENGINE_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
    return text, index


def sent_request_id(engine_id: str) -> str:
    """``"0_chatcmpl-3-0.2-1a2b3c4d"`` -> ``"3-0.2"``: the request id as the model server sent
    it (a ``<rollout id>.<turn>``, or the UUID sent in its place), every decoration the engine
    added taken off, so an engine span is found by the model call that caused it."""
    core = strip_engine_decorations(engine_id)
    without = _ENGINE_SUFFIX.sub(r"\1", core)
    return without if without != core else _without_suffix(core)


def sub_request_index(engine_id: str) -> int | None:
    """The ``<k>_`` index vLLM puts on each sub-request of one ``n > 1`` call (None: the
    call was not split)."""
    return _undecorated(engine_id)[1]


def rollout_of_engine_id(engine_id: str, sent_ids: Mapping[str, str] | None = None) -> str | None:
    """The rollout an engine's ``gen_ai.request.id`` names, or None when it names none.

    ``sent_ids`` maps ids sent upstream in another form (a UUID) to their rollout.
    """
    core = _RESPONSES_SUB.sub(r"\1", strip_engine_decorations(engine_id))
    if sent_ids:
        for candidate in (engine_id, core, _without_suffix(core)):
            if candidate in sent_ids:
                return sent_ids[candidate]
    return rollout_of_request_id(_ENGINE_SUFFIX.sub(r"\1", core))


def _without_suffix(core: str) -> str:
    """``"<uuid>-1a2b3c4d"`` -> ``"<uuid>"``: a random suffix appended after a sent UUID."""
    head, dash, tail = core.rpartition("-")
    return head if dash and len(tail) == 8 and tail.isalnum() else core
