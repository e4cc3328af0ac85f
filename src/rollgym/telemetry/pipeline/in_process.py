"""The exporter side in the recording process itself: records to an SDK ``SpanExporter``.

The exporter child (:mod:`.shipper`, :mod:`.child`) serves OTLP over HTTP and gRPC, the
destination of every run by default (the run's trace store, or an OTLP backend). This is the
same pipeline's other exporter side, in the recording process: for the console, an exporter
object a test or a bench passes in, and OTLP when the child cannot start. It takes the same records from the same provider
(:class:`~rollgym.telemetry.pipeline.recording.RecordingTracerProvider`), turns them into
``ReadableSpan`` s (:mod:`.readable`) and hands them to the exporter, counted in the same
:class:`~rollgym.telemetry.span_counts.SpanCounts`.

Two ways:

- batched (what a run uses): the hot path appends each record to a bounded queue (the
  shipper's); one daemon thread takes up to a batch at a time, converts and exports it, trying a
  failed batch again with backoff for ``patience_s`` (``telemetry.flush_timeout_s``: a backend
  slow to start loses nothing), never past the shutdown deadline;
- synchronous (tests, :func:`~rollgym.telemetry.setup.install_for_tests`): each span is
  exported as it ends, on the thread that ended it, so a test can assert right after its block.

Loss is counted as the shipper counts it: a full queue drops the new span (``queue_full``), a
batch the exporter failed is ``export_failed``, what never went out by the end ``shutdown``,
and the batch in progress when the tallies close ``unknown``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE, SPAN_QUEUE_SIZE, SPAN_SCHEDULE_DELAY_MS
from rollgym.telemetry.pipeline.readable import export_spans, readable_span
from rollgym.telemetry.pipeline.records import SpanRecord
from rollgym.telemetry.pipeline.shipper import RecordQueue
from rollgym.telemetry.span_counts import (
    REASON_EXPORT_FAILED,
    REASON_SHUTDOWN,
)

__all__ = ["InProcessExport"]

_log = logging.getLogger(__name__)
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 5.0


class InProcessExport(RecordQueue):
    """Records -> ``ReadableSpan`` s -> ``exporter``, in this process; see the module docstring."""

    def __init__(
        self,
        exporter: SpanExporter,
        resource: Resource,
        *,
        synchronous: bool = False,
        max_queue_size: int = SPAN_QUEUE_SIZE,
        max_export_batch_size: int = SPAN_EXPORT_BATCH_SIZE,
        schedule_delay_ms: float = SPAN_SCHEDULE_DELAY_MS,
        patience_s: float = 0.0,
    ) -> None:
        self._exporter = exporter
        self._resource = resource
        self._synchronous = synchronous
        super().__init__(max_queue_size, max_export_batch_size, schedule_delay_ms)
        self._patience_s = patience_s
        #: Monotonic time after which no failed batch is tried again (the flush limit).
        self._deadline: float | None = None
        #: Nothing here gives up on an endpoint early (the shipper's probe does, for OTLP/HTTP).
        self.gave_up_on_endpoint = False
        self._failure_logged = False
        self._stop_retrying = threading.Event()
        self._worker: threading.Thread | None = None
        if not synchronous:
            self._worker = threading.Thread(
                target=self._export_loop, name="rollgym-span-export", daemon=True
            )
            self._worker.start()

    # --- hot path -----------------------------------------------------------------------------
    def on_end(self, record: SpanRecord) -> None:
        """Queue one finished span (or, synchronous, export it now); never raises."""
        if self._synchronous:
            self._export_now(record)
        else:
            RecordQueue.on_end(self, record)

    def _export_now(self, record: SpanRecord) -> None:
        counts = self.counts
        with counts.lock:
            if self._closed or counts.closed:
                counts.dropped[REASON_SHUTDOWN] += 1
                return
            counts.accepted += 1
            counts.handed += 1
        self._deliver([readable_span(record, self._resource)], [record])

    # --- export thread ------------------------------------------------------------------------
    def _export_loop(self) -> None:
        self._drain(self._export_queued)

    def _export_queued(self) -> None:
        queue, popleft, counts = self._queue, self._queue.popleft, self.counts
        while queue:
            n = min(len(queue), self._batch)
            records = [popleft() for _ in range(n)]
            with counts.lock:
                counts.accepted += n
                counts.handed += n
            try:
                spans = [readable_span(record, self._resource) for record in records]
            except Exception:  # a conversion bug loses this batch (counted), not the thread
                _log.exception("converting a batch of %d spans failed", n)
                with counts.lock:
                    counts.drop_accepted(REASON_EXPORT_FAILED, n)
                continue
            self._deliver(spans, records)

    def _deliver(self, spans: Sequence[ReadableSpan], records: Sequence[SpanRecord]) -> None:
        """Export one batch patiently and count its outcome."""
        n = len(spans)
        result = self._export_patiently(spans, records)
        counts = self.counts
        with counts.lock:
            if result is SpanExportResult.SUCCESS:
                if not counts.closed:
                    counts.exported += n
            else:
                counts.drop_accepted(REASON_EXPORT_FAILED, n)
        if result is not SpanExportResult.SUCCESS:
            self._log_failure("the exporter reported failure")

    def _export_patiently(
        self, spans: Sequence[ReadableSpan], records: Sequence[SpanRecord]
    ) -> SpanExportResult:
        """One batch, tried again with backoff until ``patience_s`` or the deadline runs out."""
        give_up_at = time.monotonic() + self._patience_s
        backoff = _FIRST_RETRY_S
        while True:
            result = self._attempt(spans, records)
            if result is SpanExportResult.SUCCESS:
                return result
            limit = give_up_at if self._deadline is None else min(give_up_at, self._deadline)
            if time.monotonic() + backoff >= limit or self._stop_retrying.wait(backoff):
                return result
            backoff = min(2 * backoff, _MAX_RETRY_S)

    def _attempt(
        self, spans: Sequence[ReadableSpan], records: Sequence[SpanRecord]
    ) -> SpanExportResult:
        counts = self.counts
        with counts.lock:
            counts.in_flight = len(spans)  # if the tallies close now, the backend may have them
        try:
            return export_spans(self._exporter, spans, records, self._resource)
        except Exception as exc:  # an exporter bug must not kill the export thread
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

    # --- lifecycle ----------------------------------------------------------------------------
    def _worker_gone(self) -> bool:
        return self._worker is None

    def stop_retrying_at(self, deadline: float, *, rollouts_ended_at: float | None = None) -> None:
        """No failed batch is tried again after ``deadline`` (monotonic): the flush limit."""
        self._deadline = deadline

    def shutdown(self) -> None:
        """Export the backlog (patiently, up to the deadline), then shut the exporter down.

        Blocking; :class:`~rollgym.telemetry.setup.TelemetryHandle` runs it on a helper thread
        under its own limit and counts what is left as dropped.
        """
        if self._stopping:
            return
        self._stopping = True
        self._closed = True
        if self._worker is not None:
            self._wake.set()
            left = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
            self._worker.join(left)
        try:
            self._exporter.shutdown()
        except Exception:
            _log.debug("span exporter shutdown failed", exc_info=True)

    def stop_now(self, within_s: float = 0.0) -> None:
        """The handle's limit ran out: no batch is tried again (what is left counts dropped)."""
        self._stop_retrying.set()
