"""The recording side: an OpenTelemetry API tracer whose spans end as compact tuples.

Why not the SDK's ``Tracer``: one SDK span start and end costs about 12.7 µs of event-loop time
(locks, ``BoundedAttributes``, a ``ReadableSpan`` copy at end) and leaves about ten GC-tracked
objects per span waiting in the export queue. These spans implement the same API
(``opentelemetry.trace.Span``: attributes, events, links, status, ``record_exception``,
``update_name``, use as a context manager), take the same samplers and id generators, and are
made current with the API's own context functions, so propagation, ``get_current_span`` and
user spans inside a rollout are unchanged. What differs is only what ``end()`` does: it builds
one :data:`~rollgym.telemetry.pipeline.records.SpanRecord` and hands it to a sink (the
:class:`~rollgym.telemetry.pipeline.shipper.SpanShipper`), which moves encoding and export into
a child process.

Sampling follows the SDK: the sampler's decision, attributes and trace state are applied; a
span that is not sampled is a ``NonRecordingSpan`` carrying a fresh span id. The default
``parentbased_always_on`` sampler is decided inline (same answer, no ``SamplingResult``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util.types import Attributes, AttributeValue

from rollgym.telemetry import runtime_context
from rollgym.telemetry.current_span import warn_once
from rollgym.telemetry.pipeline.records import SpanRecord
from rollgym.telemetry.sampling import (
    TimeOrderedIdGenerator,
    random_span_id,
    time_ordered_trace_id,
)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_DEFAULT_TRACE_STATE = TraceState()
_SCALARS = (str, bool, int, float)
_INTERNAL = SpanKind.INTERNAL
_CLIENT = SpanKind.CLIENT
#: ``start_as_current_span``'s arguments after ``start_span``'s, in the API's order: ``use_span``'s.
_USE_SPAN_FLAGS = ("record_exception", "set_status_on_exception", "end_on_exit")
#: A root span's (parent span id, parent is remote) in its record.
_ROOT = (0, False)
#: The SDK's default limits (``OTEL_SPAN_*_COUNT_LIMIT``): a span's memory stays bounded.
MAX_ATTRIBUTES = 128
MAX_EVENTS = 128
MAX_LINKS = 128
_time_ns = time.time_ns
_get_current_span = trace.get_current_span
_get_current_context = runtime_context.get_current
#: The key under which the API keeps the current span in a ``Context``. Looking it up directly
#: saves the ABC ``isinstance`` that ``get_current_span`` pays on every span start.
_SPAN_KEY = runtime_context.SPAN_KEY

Sink = Callable[[SpanRecord], None]


def _span_context(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
    """A local ``SpanContext`` through the API's public constructor: building the tuple
    directly would skip a second check of ids generated here, but would tie the pipeline to
    the API's private layout."""
    return SpanContext(trace_id, span_id, False, flags, state)


def clean_value(value: object) -> AttributeValue | None:
    """An attribute value as the API allows it (scalars, homogeneous sequences), else None."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        items = tuple(value)
        if all(isinstance(item, _SCALARS) or item is None for item in items):
            return items
    return None


def clean_attributes(attributes: Attributes | Mapping[str, Any]) -> dict[str, Any]:
    """A private copy holding only valid values, at most :data:`MAX_ATTRIBUTES` of them."""
    out: dict[str, Any] = {}
    if not attributes:
        return out
    for key, value in attributes.items():
        if type(value) not in _SCALARS:  # the common case is one type check per value
            value = clean_value(value)
            if value is None:
                warn_once(f"attribute {key!r} has an invalid type; dropped")
                continue
        if len(out) >= MAX_ATTRIBUTES:
            break
        out[key] = value
    return out


class RecordingSpan(trace.Span):
    """A sampled span of rollgym's own pipeline; ``end()`` hands one record to the sink."""

    __slots__ = (
        "_context",
        "_trace_id",
        "_span_id",
        "_trace_state",
        "_parent_id",
        "_parent_remote",
        "_name",
        "_kind",
        "_start",
        "_end",
        "_attributes",
        "_events",
        "_links",
        "_status_code",
        "_status_message",
        "_scope",
        "_sink",
    )

    def __init__(
        self,
        name: str,
        ids: tuple[int, int, TraceState],
        parent: tuple[int, bool],
        kind: SpanKind,
        attributes: dict[str, Any],
        links: list[tuple[int, int, bool, dict[str, Any] | None]] | None,
        start_time: int,
        scope: tuple[str, str | None, str | None],
        sink: Sink,
    ) -> None:
        # The ids are kept as plain ints beside the SpanContext: ``SpanContext``'s fields are
        # Python-level properties (about 0.3 µs a read here), and ``end()`` and a child's
        # start read them from these slots instead.
        trace_id, span_id, state = ids
        self._context = _span_context(trace_id, span_id, _SAMPLED, state)
        self._trace_id = trace_id
        self._span_id = span_id
        self._trace_state = state
        self._parent_id, self._parent_remote = parent
        self._name = name
        self._kind = kind
        self._start = start_time
        self._end: int | None = None
        self._attributes = attributes
        self._events: list[tuple[str, int, dict[str, Any]]] | None = None
        self._links = links
        self._status_code = 0
        self._status_message: str | None = None
        self._scope = scope
        self._sink = sink

    # --- read ---------------------------------------------------------------------------------
    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    @property
    def name(self) -> str:
        return self._name

    @property
    def attributes(self) -> Mapping[str, Any]:
        return dict(self._attributes)

    # --- write --------------------------------------------------------------------------------
    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._end is not None:
            return
        current = self._attributes
        for key, value in attributes.items():
            if type(value) not in _SCALARS:
                value = clean_value(value)
                if value is None:
                    warn_once(f"attribute {key!r} has an invalid type; dropped")
                    continue
            if len(current) >= MAX_ATTRIBUTES and key not in current:
                continue
            current[key] = value

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._end is not None:
            return
        if type(value) not in _SCALARS:
            value = clean_value(value)
            if value is None:
                warn_once(f"attribute {key!r} has an invalid type; dropped")
                return
        current = self._attributes
        if len(current) < MAX_ATTRIBUTES or key in current:
            current[key] = value

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        if self._end is not None:
            return
        if self._events is None:
            self._events = []
        if len(self._events) < MAX_EVENTS:
            self._events.append((name, timestamp or _time_ns(), clean_attributes(attributes)))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if self._end is not None or not context.is_valid:
            return
        if self._links is None:
            self._links = []
        if len(self._links) < MAX_LINKS:
            self._links.append(_link(context, attributes))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """The SDK's rules: OK is final, UNSET is ignored, a description only with ERROR."""
        if self._end is not None or self._status_code == StatusCode.OK.value:
            return
        if isinstance(status, Status):
            code, message = status.status_code, status.description
        else:
            code, message = status, description if status is StatusCode.ERROR else None
        if code is StatusCode.UNSET:
            return
        self._status_code = code.value
        self._status_message = message

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """An ``exception`` event with the semantic-convention attributes, as the SDK writes it."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        event: dict[str, AttributeValue] = {
            "exception.type": f"{module}.{qualname}"
            if module and module != "builtins"
            else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end = end_time or _time_ns()
        state = self._trace_state
        kind = self._kind  # ``SpanKind.value`` is a Python-level descriptor: test identity first
        self._sink(
            (
                self._trace_id,
                self._span_id,
                self._parent_id,
                self._parent_remote,
                self._name,
                0 if kind is _INTERNAL else 2 if kind is _CLIENT else kind.value,
                self._start,
                end,
                self._attributes,
                self._events,
                self._links,
                self._status_code,
                self._status_message,
                self._scope,
                None if state is _DEFAULT_TRACE_STATE or not state else tuple(state.items()),
            )
        )


def _link(context: SpanContext, attributes: Attributes) -> tuple[int, int, bool, Any]:
    return (
        context.trace_id,
        context.span_id,
        context.is_remote,
        clean_attributes(attributes) if attributes else None,
    )


class RecordingTracer(trace.Tracer):
    """Starts :class:`RecordingSpan` s; every decision (parent, ids, sampling) is the SDK's."""

    def __init__(
        self,
        scope: tuple[str, str | None, str | None],
        sampler: Sampler,
        id_generator: IdGenerator | None,
        sink: Sink,
    ) -> None:
        self._scope = scope
        self._sampler = sampler
        self._inline_sampler = sampler is DEFAULT_ON
        if type(id_generator) is TimeOrderedIdGenerator:
            # rollgym's default: its two functions called directly, one call a span fewer
            id_generator = None
        self._trace_id = id_generator.generate_trace_id if id_generator is not None else None
        self._new_span_id = (
            id_generator.generate_span_id if id_generator is not None else random_span_id
        )
        self._sink = sink

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        current: Any = (context if context is not None else _get_current_context()).get(_SPAN_KEY)
        parent: SpanContext | None
        if type(current) is RecordingSpan:  # the usual parent: valid, sampled, local, read raw
            parent = current._context
            trace_id = current._trace_id
            parent_ids = (current._span_id, False)
        else:
            if current is None:
                parent = None
            elif type(current) is NonRecordingSpan:
                parent = current.get_span_context()
            else:  # not a span of ours: the API's lookup decides (and checks it is a Span)
                parent = _get_current_span(context).get_span_context()
            if parent is not None and parent.is_valid:
                trace_id = parent.trace_id
                parent_ids = (parent.span_id, parent.is_remote)
            else:
                parent = None
                trace_id = (
                    self._trace_id() if self._trace_id is not None else time_ordered_trace_id()
                )
                parent_ids = _ROOT
        if self._inline_sampler:  # parentbased_always_on, decided without a SamplingResult
            if parent is None:
                sampled, state = True, _DEFAULT_TRACE_STATE
            elif type(current) is RecordingSpan:
                sampled, state = True, current._trace_state
            else:
                sampled, state = parent.trace_flags.sampled, parent.trace_state
            extra: Attributes = None
        else:
            result = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
            sampled = result.decision.is_sampled()
            state = result.trace_state or _DEFAULT_TRACE_STATE
            extra = result.attributes
        span_id = self._new_span_id()
        if not sampled:
            return NonRecordingSpan(_span_context(trace_id, span_id, _NOT_SAMPLED, state))
        # A private copy, as the SDK keeps: a value the caller changes later (a list) must
        # not change the record, which is packed after the span ends (shipper docstring).
        # Our helpers pass scalars, so the usual cost is one type check a value.
        recorded = dict(attributes) if attributes else {}
        if extra:
            recorded.update(extra)
        for value in recorded.values():
            if type(value) not in _SCALARS:
                recorded = clean_attributes(recorded)
                break
        link_records = None
        if links:
            link_records = [
                _link(link.context, link.attributes) for link in links if link.context.is_valid
            ]
        return RecordingSpan(
            name,
            (trace_id, span_id, state),
            parent_ids,
            kind,
            recorded,
            link_records or None,
            start_time or _time_ns(),
            self._scope,
            self._sink,
        )

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self, name: str, *args: Any, **kwargs: Any
    ) -> Iterator[trace.Span]:
        """:meth:`start_span` with the API's arguments, passed on (not spelled a second time),
        made current by the API's ``use_span``. The API's last three (``record_exception``,
        ``set_status_on_exception``, ``end_on_exit``; True unless given, by position or by
        name) are ``use_span``'s."""
        flags = dict.fromkeys(_USE_SPAN_FLAGS, True)
        flags.update(zip(_USE_SPAN_FLAGS, args[5:8], strict=False))
        for key in _USE_SPAN_FLAGS:
            if key in kwargs:
                flags[key] = kwargs.pop(key)
        span = self.start_span(name, *args[:5], **kwargs)
        with trace.use_span(span, **flags) as current:
            yield current


class RecordingTracerProvider(trace.TracerProvider):
    """The provider rollgym installs for its own processes when it owns tracing.

    ``shutdown`` / ``force_flush`` reach the sink's owner (the shipper), so a handle can treat
    it like the SDK's provider.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        sampler: Sampler | None = None,
        id_generator: IdGenerator | None = None,
        on_shutdown: Callable[[], None] | None = None,
        on_flush: Callable[[float], bool] | None = None,
    ) -> None:
        self._sink = sink
        self._sampler = sampler if sampler is not None else DEFAULT_ON
        self._id_generator = id_generator
        self._on_shutdown = on_shutdown
        self._on_flush = on_flush
        self._tracers: dict[tuple[str, str | None, str | None], RecordingTracer] = {}

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        scope = (instrumenting_module_name or "", instrumenting_library_version, schema_url)
        tracer = self._tracers.get(scope)
        if tracer is None:
            tracer = RecordingTracer(scope, self._sampler, self._id_generator, self._sink)
            self._tracers[scope] = tracer
        return tracer

    def shutdown(self) -> None:
        if self._on_shutdown is not None:
            self._on_shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._on_flush(timeout_millis / 1000) if self._on_flush is not None else True


__all__ = [
    "RecordingSpan",
    "RecordingTracer",
    "RecordingTracerProvider",
    "clean_attributes",
    "clean_value",
]
