"""W3C trace-context in and out of a process, for the ASGI middleware and explicit hand-offs.

Propagation is the global OpenTelemetry propagator, by default W3C TraceContext + Baggage
(``traceparent``, ``tracestate``, ``baggage``; ``OTEL_PROPAGATORS`` can change it as in any
OpenTelemetry program). Servers extract it; nothing else decides parentage.

Across Ray actors and task queues the context is passed explicitly as a small carrier dict
(:func:`current_carrier` / :func:`extract_context`): implicit context never crosses a process or
a long-lived worker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from rollgym.telemetry import runtime_context
from rollgym.telemetry.current_span import warn_once


def extract_context(headers: Mapping[str, str]) -> Context:
    """The caller's context from request headers (lower-case keys, as ASGI gives them).

    Every request to every server extracts once, and what rollgym's own clients send is one
    ``traceparent`` of version 00 and nothing else: that header alone, under the default
    propagator, is read here in one step into exactly the context ``propagate.extract``
    builds (a test compares the two on many headers). Anything else (``tracestate``,
    ``baggage``, another version, blanks, another propagator) goes through ``propagate``.
    """
    try:
        traceparent = headers.get("traceparent")
        if (
            traceparent is not None
            and _W3C_DEFAULT
            and headers.get("tracestate") is None
            and not headers.get("baggage")
            and propagate.get_global_textmap() is _DEFAULT_TEXTMAP
        ):
            found = _TRACEPARENT_00.fullmatch(traceparent)
            if found is not None:
                trace_id, span_id, flags = found.groups()
                if trace_id != _ZERO_TRACE_ID and span_id != _ZERO_SPAN_ID:
                    span_context = SpanContext(
                        trace_id=int(trace_id, 16),
                        span_id=int(span_id, 16),
                        is_remote=True,
                        trace_flags=TraceFlags(int(flags, 16)),
                        trace_state=None,
                    )
                    return runtime_context.with_span(NonRecordingSpan(span_context), Context())
        return propagate.extract(headers)
    except Exception:
        warn_once("extracting trace context from headers failed")
        return Context()


#: What the default propagators read from a request: W3C trace context and baggage.
_W3C_HEADERS = frozenset((b"traceparent", b"tracestate", b"baggage"))


def asgi_carrier(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """An ASGI request's headers (lower-case byte names) as the propagator's carrier.

    With the default propagators only the three headers they read are decoded (a request
    carries half a dozen others that no propagator looks at); with any other propagator, all
    of them, since it may read any header. Repeated headers: the last one, as before."""
    if _W3C_DEFAULT and propagate.get_global_textmap() is _DEFAULT_TEXTMAP:
        return {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in raw
            if key in _W3C_HEADERS
        }
    return {key.decode("latin-1"): value.decode("latin-1") for key, value in raw}


def attach_context(ctx: Context) -> object | None:
    """Make ``ctx`` current for one request; returns the token for :func:`detach_context`."""
    try:
        return context_api.attach(ctx)
    except Exception:
        warn_once("attaching a request's trace context failed")
        return None


def detach_context(token: object | None) -> None:
    """Undo :func:`attach_context`; never raises."""
    if token is None:
        return
    try:
        context_api.detach(token)  # type: ignore[arg-type]
    except Exception:
        warn_once("detaching a request's trace context failed")


#: The propagator the API built at import from ``OTEL_PROPAGATORS`` (unset: W3C trace context +
#: baggage). :func:`inject_span` writes its headers itself only while it is still the global one.
_DEFAULT_TEXTMAP = propagate.get_global_textmap()
#: The key under which the API keeps baggage in a ``Context``, read once through the API
#: (``set_baggage``): an empty lookup is cheaper than ``baggage.get_all()``'s read-only copy.
_BAGGAGE_KEY = next(iter(baggage.set_baggage("k", "v", Context())))
_W3C_DEFAULT = os.environ.get("OTEL_PROPAGATORS", "tracecontext,baggage").replace(" ", "") in (
    "tracecontext,baggage",
    "tracecontext",
)
#: A version-00 ``traceparent`` exactly as W3C writes it (and :func:`inject_span` sends it).
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16


def inject_span(headers: dict[str, str], span_context: SpanContext) -> str | None:
    """``propagate.inject(headers)`` for a client span that is current, without the detour.

    With the default W3C propagator and no baggage in the context, the headers are exactly
    ``traceparent`` (and ``tracestate`` when set), formatted here in one step: on the driver's
    traced hot path the generic path costs about as much as recording a span. Any other
    propagator, or baggage to send, goes through ``propagate.inject``. Returns the trace id
    that went out (32 hex digits, formatted once for both), or None for an invalid context.
    """
    if not span_context.is_valid:
        propagate.inject(headers)
        return None
    trace_id = format(span_context.trace_id, "032x")
    if (
        _W3C_DEFAULT
        and propagate.get_global_textmap() is _DEFAULT_TEXTMAP
        and not runtime_context.get_current().get(_BAGGAGE_KEY)
    ):
        headers["traceparent"] = "00-%s-%016x-%02x" % (  # noqa: UP031 - the fastest spelling
            trace_id,
            span_context.span_id,
            span_context.trace_flags,
        )
        state = span_context.trace_state
        if state:
            headers["tracestate"] = state.to_header()
        return trace_id
    propagate.inject(headers)
    return trace_id


def inject_current(headers: dict[str, str]) -> str | None:
    """``propagate.inject(headers)`` for the current context, with :func:`inject_span`'s short
    way: the traced path without a client span of its own (the ``http`` group off) takes it
    once a request. With the default W3C propagator and no baggage, a context without a
    valid span writes nothing, exactly as the propagator would, and a valid one writes
    ``traceparent`` in one step. Returns the trace id that went out, or None.
    """
    context = runtime_context.get_current()
    span_context = trace.get_current_span(context).get_span_context()
    if (
        _W3C_DEFAULT
        and not span_context.is_valid
        and propagate.get_global_textmap() is _DEFAULT_TEXTMAP
        and not context.get(_BAGGAGE_KEY)
    ):
        return None
    return inject_span(headers, span_context)


def current_carrier() -> dict[str, str]:
    """The current context as headers, to pass explicitly to a Ray actor or a queued task."""
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier)
    except Exception:
        warn_once("injecting trace context into a carrier failed")
    return carrier


def current_trace_id() -> str | None:
    """32 lowercase hex digits of the current trace, or None when no span is current."""
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None
