"""rollgym's direct context calls do what the OpenTelemetry API does, and a server's carrier
holds what the propagators read."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as context_api
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rollgym.telemetry import runtime_context
from rollgym.telemetry._state import state
from rollgym.telemetry.context import asgi_carrier, extract_context
from rollgym.telemetry.current_span import current_span

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def test_the_standard_runtime_is_read_directly():
    # The default runtime: the functions are the variable's own C methods, not the API's.
    assert runtime_context._CURRENT is not None
    assert runtime_context.get_current == runtime_context._CURRENT.get


def test_get_attach_detach_match_the_api():
    span = trace.NonRecordingSpan(trace.SpanContext(1, 2, False))
    before = context_api.get_current()
    assert runtime_context.get_current() is before
    ours = runtime_context.with_span(span, before)
    theirs = trace.set_span_in_context(span, before)
    assert ours == theirs and type(ours) is type(theirs)
    token = runtime_context.attach(ours)
    try:
        # what the API and user code see is what rollgym made current
        assert context_api.get_current() is ours
        assert trace.get_current_span() is span
        assert runtime_context.current_span() is span
    finally:
        runtime_context.detach(token)
    assert context_api.get_current() is before
    assert runtime_context.current_span() is trace.INVALID_SPAN


def test_a_user_span_nests_under_rollgym_spans_and_back(exporter: InMemorySpanExporter):
    # A user's tracer through the API (a provider of its own: the process's global one is
    # set once, by whichever test came first); parentage is the shared current context's.
    user_provider = TracerProvider()
    user_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = user_provider.get_tracer("user")
    with current_span("rollgym.outer") as outer:
        with tracer.start_as_current_span("user.inner") as inner:
            assert runtime_context.current_span() is inner
            with current_span("rollgym.innermost") as innermost:
                assert trace.get_current_span() is innermost
        assert trace.get_current_span() is outer
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["user.inner"].parent.span_id == spans["rollgym.outer"].context.span_id
    assert spans["rollgym.innermost"].parent.span_id == spans["user.inner"].context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_span_left_in_another_task_warns_and_does_not_raise(exporter, caplog):
    # The token was made in another task's context: reset raises there, the span still ends.
    manager = current_span("crossing")
    manager.__enter__()

    async def elsewhere() -> None:
        manager.__exit__(None, None, None)

    asyncio.run(elsewhere())
    assert [s.name for s in exporter.get_finished_spans()] == ["crossing"]
    assert "detaching a span's context failed" in caplog.text
    runtime_context.detach(manager._token)  # type: ignore[arg-type]  (restore this context)
    assert state.tracer is not None


def test_another_runtime_context_goes_through_the_api():
    code = (
        "import os; os.environ['OTEL_PYTHON_CONTEXT'] = 'nonexistent_runtime';\n"
        "from opentelemetry import context as c\n"
        "from rollgym.telemetry import runtime_context as r\n"
        "print(r._CURRENT is None, r.get_current is c.get_current, r.attach is c.attach)\n"
    )
    # An unknown OTEL_PYTHON_CONTEXT makes the API fall back (and log); the short way then
    # follows whatever runtime the API ended up with, so check both branches are coherent.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    standard, api_get, api_attach = out.stdout.split()
    assert (standard == "True") == (api_get == "True") == (api_attach == "True")


RAW = [
    (b"host", b"127.0.0.1:8000"),
    (b"traceparent", f"00-{TRACE}-{SPAN}-01".encode()),
    (b"user-agent", b"rollgym"),
    (b"baggage", b"user=alice"),
    (b"tracestate", b"rojo=00f067aa"),
]


def test_the_carrier_holds_what_the_default_propagators_read():
    assert asgi_carrier(RAW) == {
        "traceparent": f"00-{TRACE}-{SPAN}-01",
        "baggage": "user=alice",
        "tracestate": "rojo=00f067aa",
    }
    full = {key.decode(): value.decode() for key, value in RAW}
    assert propagate.extract(asgi_carrier(RAW)).keys() == propagate.extract(full).keys()


def test_another_propagator_gets_every_header():
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator()]))
    try:
        assert asgi_carrier(RAW) == {key.decode(): value.decode() for key, value in RAW}
        # and extraction goes through that propagator, which reads no baggage
        assert baggage.get_all(extract_context(asgi_carrier(RAW))) == {}
    finally:
        propagate.set_global_textmap(before)
