"""A batch span processor that counts what it exports and what it drops.

The SDK's ``BatchSpanProcessor`` drops silently when its bounded queue is full (it logs a
warning, nothing a summary can report). We keep it as the engine (its worker thread, batching
and fork handling are the SDK's) and put two thin public-API wrappers around it:

- :class:`CountingSpanProcessor` tracks queue occupancy as *accepted − handed to the exporter*
  and refuses a span itself when that reaches the queue size. Our occupancy is never below the
  SDK's real queue length (the SDK pops a batch just before calling ``export``), so the SDK
  never reaches its own silent-drop branch: every drop is ours, and counted.
- :class:`_CountingExporter` counts spans whose export succeeded, and spans whose export failed
  (a dead or erroring endpoint), logging the first failure only. A failed batch is tried
  again, with backoff, for up to ``patience_s`` (and never past the shutdown deadline), so a
  backend that is merely slow to start (a fresh MLflow server) loses nothing.

``on_end`` is called by whichever thread ends a span; it does a lock, two integer operations and
an append onto the SDK's deque. Export runs on the SDK's background thread with a bounded
per-request timeout, so a slow or dead endpoint never slows or fails a rollout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE, SPAN_QUEUE_SIZE, SPAN_SCHEDULE_DELAY_MS
from rollgym.telemetry.span_counts import SpanCountRecord, make_record

_log = logging.getLogger(__name__)

REASON_QUEUE_FULL = "queue_full"
REASON_EXPORT_FAILED = "export_failed"
REASON_SHUTDOWN = "shutdown"
DROP_REASONS = (REASON_QUEUE_FULL, REASON_EXPORT_FAILED, REASON_SHUTDOWN)
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 5.0


class SpanCounts:
    """Thread-safe tallies shared by the processor and its exporter wrapper."""

    __slots__ = (
        "lock",
        "accepted",
        "handed",
        "exported",
        "dropped",
        "unknown",
        "in_flight",
        "closed",
    )

    def __init__(self) -> None:
        #: Held to read or change several tallies together: the processor, its exporter
        #: wrapper and the shipper's threads all take it (public: they are its users).
        self.lock = threading.Lock()
        self.accepted = 0
        self.handed = 0
        self.exported = 0
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        #: Sent, but no answer came: the backend may or may not have stored them.
        self.unknown = 0
        #: The batch going out now (its request in progress, no answer yet): unknown if the
        #: tallies close before it has an outcome, since the backend may receive it whole.
        self.in_flight = 0
        #: Set by :meth:`close`; results that arrive later no longer change the tallies.
        self.closed = False

    def settle_in_flight(self) -> None:
        """The batch going out gets no answer any more: unknown. Call with ``lock`` held."""
        if not self.closed:
            self.unknown += self.in_flight
        self.in_flight = 0

    def close(self) -> None:
        """Freeze the tallies at shutdown: the batch going out (its request in progress) is
        unknown, and every other accepted span that never reached an outcome (still queued, or
        waiting to be tried again) is dropped.

        Without this, a dead endpoint whose exporter is still retrying when the shutdown time
        limit runs out would lose spans that no counter reports.
        """
        with self.lock:
            if self.closed:
                return
            self.settle_in_flight()
            self.closed = True
            unsent = self.settled_short_of(self.accepted)
            if unsent > 0:
                self.dropped[REASON_SHUTDOWN] += unsent

    def settled_short_of(self, n: int) -> int:
        """How many of ``n`` spans have no export outcome yet (exported, failed or unknown)."""
        return n - self.exported - self.dropped[REASON_EXPORT_FAILED] - self.unknown

    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def snapshot(self) -> SpanCountRecord:
        return make_record(self.exported, self.total_dropped(), self.unknown, self.dropped)


class _CountingExporter(SpanExporter):
    """Wraps the real exporter: counts results, never raises, logs the first failure once."""

    def __init__(self, inner: SpanExporter, counts: SpanCounts, patience_s: float = 0.0) -> None:
        self._inner = inner
        self._counts = counts
        self._failure_logged = False
        self._patience_s = patience_s
        #: Monotonic time after which no failed batch is tried again (set at shutdown).
        self.deadline: float | None = None
        self._stopped = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        counts = self._counts
        with counts.lock:
            counts.handed += n
        result = self._export_patiently(spans)
        with counts.lock:
            if counts.closed:
                pass  # already counted as dropped at shutdown
            elif result is SpanExportResult.SUCCESS:
                counts.exported += n
            else:
                counts.dropped[REASON_EXPORT_FAILED] += n
        if result is not SpanExportResult.SUCCESS:
            self._log_failure("the exporter reported failure")
        return result

    def _export_patiently(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """One batch, tried again with backoff until ``patience_s`` or the deadline runs out."""
        give_up_at = time.monotonic() + self._patience_s
        backoff = _FIRST_RETRY_S
        while True:
            result = self._attempt(spans)
            if result is SpanExportResult.SUCCESS:
                return result
            limit = give_up_at if self.deadline is None else min(give_up_at, self.deadline)
            if time.monotonic() + backoff >= limit or self._stopped.wait(backoff):
                return result
            backoff = min(2 * backoff, _MAX_RETRY_S)

    def _attempt(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        counts = self._counts
        with counts.lock:
            counts.in_flight = len(spans)  # if the tallies close now, the backend may have them
        try:
            return self._inner.export(spans)
        except Exception as exc:  # an exporter bug must not kill the SDK worker thread
            self._log_failure(f"{type(exc).__name__}: {exc}")
            return SpanExportResult.FAILURE
        finally:
            with counts.lock:
                counts.in_flight = 0

    def _log_failure(self, why: str) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            _log.warning(
                "span export failed (%s); further failures are counted as dropped spans, "
                "not logged",
                why,
            )

    def shutdown(self) -> None:
        self._stopped.set()
        try:
            self._inner.shutdown()
        except Exception:  # noqa: BLE001 - shutdown never raises
            _log.debug("span exporter shutdown failed", exc_info=True)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception:
            return False


class CountingSpanProcessor(SpanProcessor):
    """Batch export through the SDK, with every exported and dropped span counted."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = SPAN_QUEUE_SIZE,
        max_export_batch_size: int = SPAN_EXPORT_BATCH_SIZE,
        schedule_delay_ms: float = SPAN_SCHEDULE_DELAY_MS,
        patience_s: float = 0.0,
    ) -> None:
        self.counts = SpanCounts()
        self._max_queue_size = max_queue_size
        self._shutdown = False
        self._exporter = _CountingExporter(exporter, self.counts, patience_s)
        self._batch = BatchSpanProcessor(
            self._exporter,
            max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(max_export_batch_size, max_queue_size),
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        counts = self.counts
        with counts.lock:
            if self._shutdown:
                counts.dropped[REASON_SHUTDOWN] += 1
                return
            if counts.accepted - counts.handed >= self._max_queue_size:
                counts.dropped[REASON_QUEUE_FULL] += 1
                return
            counts.accepted += 1
        self._batch.on_end(span)

    def stop_retrying_at(self, deadline: float) -> None:
        """No failed batch is tried again after ``deadline`` (monotonic): the flush limit."""
        self._exporter.deadline = deadline

    def shutdown(self) -> None:
        """Export everything queued (patiently, up to the deadline), then stop the SDK's worker."""
        with self.counts.lock:
            self._shutdown = True
        self._batch.force_flush()  # on this thread; the SDK's own shutdown would cap it at 30 s
        self._batch.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)
