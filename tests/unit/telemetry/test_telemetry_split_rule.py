"""The split rule of TELEMETRY.md: only the owned standalone job makes dispatches new roots."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from rollgym.telemetry import spans
from rollgym.telemetry._state import state
from rollgym.telemetry.spans import _OWNED_JOB_SPAN_CONTEXT

ROW = {"task_index": 3, "rollout_index": 0, "attempt": 0}


def _row(i: int) -> dict[str, int]:
    return {"task_index": i, "rollout_index": 0, "attempt": 0}


def test_standalone_job_gives_each_dispatch_its_own_trace_linked_to_the_job(named):
    with spans.job_span("run-1") as job:
        assert _OWNED_JOB_SPAN_CONTEXT.get() == job.get_span_context()
        for i in range(3):
            with spans.dispatch_span(_row(i), "agent_a", "agent_a") as d:
                assert trace.get_current_span() is d
                with spans.http_client_span("POST", "agent_a", "http://127.0.0.1:1/run", "/run"):
                    pass
            assert trace.get_current_span() is job
    assert _OWNED_JOB_SPAN_CONTEXT.get() is None

    (job_s,) = named("gym.job")
    dispatches = named("gym.rollout.dispatch")
    assert len(dispatches) == 3
    assert job_s.parent is None
    trace_ids = {d.context.trace_id for d in dispatches}
    assert len(trace_ids) == 3 and job_s.context.trace_id not in trace_ids
    for d in dispatches:
        assert d.parent is None
        (link,) = d.links
        assert link.context.trace_id == job_s.context.trace_id
        assert link.context.span_id == job_s.context.span_id
    # The HTTP client span sits inside its dispatch's trace, not the job's.
    for client in named("POST /run"):
        assert client.parent is not None
        assert client.context.trace_id in trace_ids


def test_embedder_root_span_nests_dispatch_without_link(named):
    outer = state.tracer.start_span("embedder.step")
    with trace.use_span(outer, end_on_exit=True), spans.job_span("run-1"):
        assert _OWNED_JOB_SPAN_CONTEXT.get() is None
        with spans.dispatch_span(ROW, "agent", "agent"):
            pass
    (job_s,) = named("gym.job")
    (d,) = named("gym.rollout.dispatch")
    assert job_s.parent.span_id == outer.get_span_context().span_id
    assert d.context.trace_id == outer.get_span_context().trace_id
    assert d.parent.span_id == job_s.context.span_id
    assert d.links == ()


def test_job_group_off_under_embedder_root_nests(named):
    """No gym.job at all (the group is off): the embedder's root is not ownership."""
    outer = state.tracer.start_span("embedder.root")
    with trace.use_span(outer, end_on_exit=True), spans.dispatch_span(ROW, "agent", "agent"):
        pass
    (d,) = named("gym.rollout.dispatch")
    assert d.parent.span_id == outer.get_span_context().span_id
    assert d.context.trace_id == outer.get_span_context().trace_id
    assert d.links == ()


def test_no_current_span_and_no_job_gives_unlinked_root(named):
    with spans.dispatch_span(ROW, "agent", "agent"):
        pass
    (d,) = named("gym.rollout.dispatch")
    assert d.parent is None and d.links == ()


def test_attached_remote_non_recording_parent_nests(named):
    remote = SpanContext(
        trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    token = context_api.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        with spans.dispatch_span(ROW, "agent", "agent"):
            pass
    finally:
        context_api.detach(token)
    (d,) = named("gym.rollout.dispatch")
    assert d.context.trace_id == 0x1234
    assert d.parent.span_id == 0x5678 and d.parent.is_remote
    assert d.links == ()


def test_remote_parent_then_job_is_not_owned(named):
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    token = context_api.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        with spans.job_span("run-1"):
            assert _OWNED_JOB_SPAN_CONTEXT.get() is None
            with spans.dispatch_span(ROW, "agent", "agent"):
                pass
    finally:
        context_api.detach(token)
    (d,) = named("gym.rollout.dispatch")
    assert d.context.trace_id == 0xABC and d.links == ()


def test_child_of_the_owned_job_nests(named):
    with spans.job_span("run-1") as job:
        assert _OWNED_JOB_SPAN_CONTEXT.get() is not None
        with spans.finalize_span() as child, spans.dispatch_span(ROW, "agent", "agent"):
            pass
    (d,) = named("gym.rollout.dispatch")
    assert d.parent.span_id == child.get_span_context().span_id
    assert d.context.trace_id == job.get_span_context().trace_id
    assert d.links == ()


def test_exception_inside_job_resets_owner_and_propagates_unchanged(named):
    class Boom(Exception):
        pass

    err = Boom("x")
    with pytest.raises(Boom) as caught, spans.job_span("run-1"):
        assert _OWNED_JOB_SPAN_CONTEXT.get() is not None
        raise err
    assert caught.value is err
    assert _OWNED_JOB_SPAN_CONTEXT.get() is None
    (job_s,) = named("gym.job")
    assert job_s.status.status_code.name == "ERROR"
    assert (
        job_s.attributes["error.type"]
        == "test_exception_inside_job_resets_owner_and_propagates_unchanged.<locals>.Boom"
    )
    assert trace.get_current_span().get_span_context().is_valid is False


async def test_cancelled_job_task_resets_owner(named):
    started = asyncio.Event()
    seen: list[object] = []

    async def job() -> None:
        try:
            with spans.job_span("run-1"):
                seen.append(_OWNED_JOB_SPAN_CONTEXT.get())
                started.set()
                await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(_OWNED_JOB_SPAN_CONTEXT.get())  # inside the cancelled task's context
            raise

    task = asyncio.create_task(job())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[0] is not None
    assert seen[1] is None
    (job_s,) = named("gym.job")
    assert job_s.status.status_code.name == "ERROR"
    assert job_s.attributes["error.type"] == "CancelledError"


async def test_owner_is_reset_inside_the_job_task_after_return(named):
    async def job() -> object:
        with spans.job_span("run-1"):
            pass
        return _OWNED_JOB_SPAN_CONTEXT.get()

    assert await asyncio.create_task(job()) is None


async def test_concurrent_dispatches_under_owned_job_get_distinct_traces(named):
    async def one(i: int) -> int:
        with spans.dispatch_span(_row(i), "agent", "agent") as d:
            await asyncio.sleep(0)
            with spans.rollout_span(f"{i}-0") as r:
                await asyncio.sleep(0)
                assert r.get_span_context().trace_id == d.get_span_context().trace_id
            return d.get_span_context().trace_id

    with spans.job_span("run-1"):
        ids = await asyncio.gather(*(one(i) for i in range(50)))
    assert len(set(ids)) == 50
    for r in named("gym.rollout"):
        (d,) = [
            x for x in named("gym.rollout.dispatch") if x.context.trace_id == r.context.trace_id
        ]
        assert d.attributes["gym.rollout.id"] == r.attributes["gym.rollout.id"]
