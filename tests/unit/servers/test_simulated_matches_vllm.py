"""The simulated engine emits what vLLM emits: held to the record of a real vLLM.

``vllm_shape.json`` was recorded from vLLM's CPU build by ``tests/e2e/test_real_vllm.py``
(which fails when a vLLM upgrade changes it). Here the simulated model is asked the same
request, plain and streamed, and its ``llm_request`` span, answer keys, chunk keys and id forms
must be the record's, so the fake cannot drift from the engine it stands in for.
"""

from __future__ import annotations

from typing import Any

import orjson
from engine_shape import SHAPE_REQUEST, SHAPE_REQUEST_ID, SHAPE_STREAM_REQUEST_ID, load, shape_of
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.telemetry import names

#: What the simulated engine span carries beyond vLLM's: the rollout id, which rollgym's own
#: tests read directly (vLLM's span names its rollout only through ``gen_ai.request.id``).
SIMULATED_ONLY = {names.ROLLOUT_ID}


async def _simulated_shape(serving: Any, client: Any) -> dict[str, Any]:
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    model = SimulatedModel.build("policy", {"latency": {"kind": "fixed", "seconds": 0.0}})
    async with serving(model) as url:
        plain = await client.post_json(
            "policy",
            url + "/v1/chat/completions",
            SHAPE_REQUEST,
            headers={"X-Request-Id": SHAPE_REQUEST_ID},
        )
        streamed = {**SHAPE_REQUEST, "stream": True, "stream_options": {"include_usage": True}}
        async with client.stream(
            "policy",
            url + "/v1/chat/completions",
            streamed,
            headers={"X-Request-Id": SHAPE_STREAM_REQUEST_ID},
        ) as response:
            raw = await response.read()
    chunks = [
        orjson.loads(line[len(b"data: ") :])
        for line in raw.splitlines()
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]
    (span,) = [
        s
        for s in exporter.get_finished_spans()
        if s.name == names.SPAN_ENGINE_REQUEST
        and SHAPE_REQUEST_ID in str(s.attributes.get(names.GEN_AI_REQUEST_ID))
    ]
    attributes = {k: v for k, v in (span.attributes or {}).items() if k not in SIMULATED_ONLY}
    return shape_of(plain.data, chunks, span.name, span.kind.name, attributes, "simulated")


async def test_the_simulated_engine_span_is_vllms(serving, client):
    recorded = load()["engine_span"]
    simulated = (await _simulated_shape(serving, client))["engine_span"]
    assert simulated == recorded


async def test_the_simulated_answer_and_chunks_have_vllms_keys_and_ids(serving, client):
    recorded = load()
    simulated = await _simulated_shape(serving, client)
    for key in (
        "chat_completion",
        "chat_completion_id",
        "chat_completion_chunk",
        "chat_completion_chunk_ids",
    ):
        assert simulated[key] == recorded[key], key
