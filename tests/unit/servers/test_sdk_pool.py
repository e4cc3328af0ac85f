"""Rollouts' OpenAI SDK clients share one connection pool and still stay apart.

With the real ``openai`` SDK against the simulated model server: many rollouts' clients, in
concurrent tasks, send over one pool (a handful of connections, not one per rollout), each
request carries its own rollout's id and trace, closing a rollout's client leaves the pool to
the others, and the blocking client shares its own pool across threads.
"""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers import sdk_pool
from rollgym.servers.rollout_context import ModelClient, RolloutContext
from rollgym.telemetry import names
from rollgym.telemetry.setup import install_for_tests

FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0.05}}
ARITH = [{"role": "user", "content": "Compute: 2 + 3\nReply with 'Answer: <number>'."}]
ROLLOUTS = 60


def _rollout(client, url: str, rollout_id: str) -> RolloutContext:
    model = ModelClient(client, "policy", url, rollout_id=rollout_id, model_name="sim", timeout=30)
    return RolloutContext(rollout_id, model, None)


async def test_concurrent_rollouts_share_one_pool_and_keep_their_own_ids(serving, client):
    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    from opentelemetry import trace

    tracer = trace.get_tracer("test")
    async with serving(SimulatedModel.build("policy", FAST)) as url:

        async def one(i: int) -> tuple[list[str], int, object]:
            rollout = _rollout(client, url, f"{i}-0")
            with tracer.start_as_current_span("gym.rollout") as parent:
                sdk = rollout.async_openai()
                ids = [
                    (await sdk.chat.completions.create(model="sim", messages=ARITH)).id
                    for _ in range(2)
                ]
            await rollout.aclose()
            return ids, parent.get_span_context().trace_id, sdk._client._transport.inner

        results = await asyncio.gather(*(one(i) for i in range(ROLLOUTS)))
        pool = sdk_pool.async_pool()
        # a rollout's close left the shared pool open for the next rollout
        late = _rollout(client, url, "late-0")
        answer = await late.async_openai().chat.completions.create(model="sim", messages=ARITH)
        await late.aclose()
        # connections kept open for reuse (aiohttp's pool; the SDK ships its transport)
        idle = pool.pooled.client.connector._conns
        connections = sum(len(held) for held in idle.values())
        await sdk_pool.aclose_async_pool()
    assert answer.id == "chatcmpl-late-0.0"
    assert all(inner is pool for _, _, inner in results)
    assert isinstance(pool, sdk_pool.resend_on_stale_class())
    assert isinstance(pool.pooled, sdk_pool.aiohttp_transport_class())
    # far fewer connections than rollouts: the pool reuses them (all 60 were in flight at once)
    assert 1 <= connections <= ROLLOUTS
    for i, (ids, _, _) in enumerate(results):
        assert ids == [f"chatcmpl-{i}-0.0", f"chatcmpl-{i}-0.1"]
    traces = {f"{i}-0": trace_id for i, (_, trace_id, _) in enumerate(results)}
    spans = exporter.get_finished_spans()
    carrying = [s for s in spans if s.attributes and names.ROLLOUT_ID in s.attributes]
    engines = [s for s in carrying if s.name == names.SPAN_ENGINE_REQUEST]
    assert len(engines) == 2 * ROLLOUTS + 1
    for span in carrying:
        rollout_id = span.attributes[names.ROLLOUT_ID]
        if rollout_id in traces:  # no span of one rollout in another's trace
            assert span.context.trace_id == traces[rollout_id], (span.name, rollout_id)


async def test_blocking_clients_share_the_process_pool_across_threads(serving, client):
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        rollouts = [_rollout(client, url, f"t{i}-0") for i in range(8)]
        clients = [r.openai() for r in rollouts]

        def call(sdk) -> str:
            return sdk.chat.completions.create(model="sim", messages=ARITH).id

        ids = await asyncio.gather(*(asyncio.to_thread(call, c) for c in clients))
        for rollout in rollouts:
            await rollout.aclose()
        after = await asyncio.to_thread(call, _rollout(client, url, "after-0").openai())
    assert ids == [f"chatcmpl-t{i}-0.0" for i in range(8)]
    assert after == "chatcmpl-after-0.0"
    assert {c._client._transport.inner for c in clients} == {sdk_pool.sync_pool()}


def test_the_pool_is_built_once_per_loop() -> None:
    async def two_calls() -> tuple[object, object]:
        pools = sdk_pool.async_pool(), sdk_pool.async_pool()
        await sdk_pool.aclose_async_pool()
        return pools

    first, again = asyncio.run(two_calls())
    other, _ = asyncio.run(two_calls())
    assert first is again
    assert other is not first  # a pool's sockets belong to its loop
