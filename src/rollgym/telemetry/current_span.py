"""The one context manager every span helper is built on: start, make current, end, never raise.

Why not ``tracer.start_as_current_span``: we need three guarantees it does not give together.
A failure of telemetry itself (a broken exporter hook, a bad attribute) must not reach the
caller, so starting and ending are guarded and fall back to the invalid span; an exception from
the caller's own body must propagate unchanged, after being recorded on the span; and a
cancellation (``asyncio.CancelledError``, a ``BaseException``) marks the span as an error named
by its type without a stack trace, since it is control flow rather than a fault.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import TracebackType

from opentelemetry import context as context_api
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import Attributes

from rollgym.telemetry import names, runtime_context
from rollgym.telemetry._state import state

_log = logging.getLogger(__name__)
_warned: set[str] = set()


def warn_once(what: str) -> None:
    """Log a telemetry failure the first time it happens; it is never raised."""
    if what not in _warned:
        _warned.add(what)
        _log.warning("telemetry: %s (ignored; logged once)", what, exc_info=True)


def record_error(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed by ``exc``; a non-``Exception`` (cancellation) gets no stack trace."""
    try:
        if not span.is_recording():
            return
        kind = type(exc).__qualname__
        span.set_attribute(names.ERROR_TYPE, kind)
        if isinstance(exc, Exception):
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{kind}: {exc}"[:500]))
        else:
            span.set_status(Status(StatusCode.ERROR, kind))
    except Exception:
        warn_once("recording an error on a span failed")


@dataclass(slots=True, eq=False, repr=False)
class current_span:  # noqa: N801 - used like the function it replaced: ``with current_span(...)``
    """Start ``name`` as a child of ``context`` (default: the current one) and make it current.

    The span is made current inside ``attach_to`` (default: the current context), so a new
    root still keeps the caller's baggage, and a server span keeps the caller's remote baggage.

    A slotted dataclass rather than a ``@contextmanager`` generator: every traced rollout
    enters two of these in the driver's one event-loop thread, and a generator-based manager
    costs a generator frame, two resumptions and a wrapper object per span on that hot path.
    """

    name: str
    _: KW_ONLY
    kind: SpanKind = SpanKind.INTERNAL
    attributes: Attributes = None
    context: context_api.Context | None = None
    links: Sequence[Link] | None = None
    attach_to: context_api.Context | None = None
    _span: Span = field(default=INVALID_SPAN, init=False)
    _token: object | None = field(default=None, init=False)

    def __enter__(self) -> Span:
        try:
            # The current context read once for both steps (each would read it again when
            # given None): the same parent and the same attach target, two lookups fewer.
            context, attach_to = self.context, self.attach_to
            if context is None or attach_to is None:
                current = runtime_context.get_current()
                context = current if context is None else context
                attach_to = current if attach_to is None else attach_to
            span = state.tracer.start_span(
                self.name,
                context=context,
                kind=self.kind,
                attributes=self.attributes,
                links=self.links,
            )
            self._span = span
            self._token = runtime_context.attach(runtime_context.with_span(span, attach_to))
        except Exception:
            warn_once(f"starting span {self.name!r} failed")
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if exc is not None and not isinstance(exc, GeneratorExit):
            record_error(span, exc)
        token = self._token
        if token is not None:
            try:
                runtime_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                warn_once("detaching a span's context failed")
        try:
            span.end()
        except Exception:
            warn_once(f"ending span {self.name!r} failed")
        # None: the caller's own exception (if any) propagates unchanged.
