"""The shape of what an engine emits, keys only, and the committed record of vLLM's.

``vllm_shape.json`` beside this file is what vLLM's CPU build (the version it names) emitted in
``tests/e2e/test_real_vllm.py``: the ``llm_request`` span (name, kind, attribute names) and
the key paths of a chat completion and of its streamed chunks, asked with token ids and
log-probabilities. No value is kept, so the record is stable across runs. The live test fails
when vLLM's shape is no longer the record (an upgrade changed it); the unit test fails when the
simulated engine's shape drifts from it. Both call :func:`key_paths` here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SHAPE_FILE = Path(__file__).resolve().parent / "vllm_shape.json"

#: The request both sides are asked (token capture on, two alternatives per token).
SHAPE_REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Compute: 1 + 1"}],
    "max_tokens": 4,
    "return_token_ids": True,
    "logprobs": True,
    "top_logprobs": 2,
}
#: The request ids both sides are sent (``X-Request-Id``), plain and streamed.
SHAPE_REQUEST_ID = "7-0.3"
SHAPE_STREAM_REQUEST_ID = "7-0.4"


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value: ``a.b``, lists as ``[]`` (``choices[].index``)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            out |= key_paths(item, path)
    elif isinstance(value, list):
        for item in value:
            out |= key_paths(item, prefix + "[]")
    return out


def chunk_paths(chunks: list[dict[str, Any]]) -> set[str]:
    """Key paths over all chunks of a stream (their union)."""
    out: set[str] = set()
    for chunk in chunks:
        out |= key_paths(chunk)
    return out


def id_form(value: str) -> str:
    """An id with the request id sent replaced by ``{id}``: ``chatcmpl-{id}``."""
    for request_id in (SHAPE_REQUEST_ID, SHAPE_STREAM_REQUEST_ID):
        value = value.replace(request_id, "{id}")
    return value


def shape_of(
    plain: dict[str, Any],
    chunks: list[dict[str, Any]],
    span_name: str,
    span_kind: str,
    span_attributes: Mapping[str, Any],
    engine: str,
) -> dict[str, Any]:
    """The record: one plain answer, one stream's chunks and the plain answer's engine span."""
    return {
        "engine": engine,
        "engine_span": {
            "name": span_name,
            "kind": span_kind,
            "attributes": sorted(span_attributes),
            "request_id": id_form(str(span_attributes.get("gen_ai.request.id"))),
        },
        "chat_completion": sorted(key_paths(plain)),
        "chat_completion_id": id_form(str(plain.get("id"))),
        "chat_completion_chunk": sorted(chunk_paths(chunks)),
        "chat_completion_chunk_ids": sorted({id_form(str(c.get("id"))) for c in chunks}),
    }


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SHAPE_FILE.read_text(encoding="utf-8"))
    return data


def save(shape: dict[str, Any]) -> None:
    SHAPE_FILE.write_text(json.dumps(shape, indent=2, sort_keys=True) + "\n", encoding="utf-8")
