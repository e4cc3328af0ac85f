"""The recording process's half of the export pipeline: a bounded queue and a pipe to a child.

Hot path (:meth:`SpanShipper.on_end`, called by ``RecordingSpan.end`` on whatever thread ends a
span): a length check, a ``deque.append`` of the record (atomic under the GIL, no lock), and
once per batch an ``Event.set``. Everything else happens on two daemon threads:

- the *writer* takes up to ``max_export_batch_size`` records at a time, marshals them as one
  (:func:`~rollgym.telemetry.pipeline.frames.pack_batch`) and writes them to the child's stdin
  as one frame; a full pipe blocks only this thread;
- the *reader* reads the child's lines (:mod:`.child`) and counts them: ``ok n`` delivered,
  ``fail n`` dropped, ``unknown n`` sent with no answer (the backend may have stored it),
  ``unsent n`` dropped at shutdown; ``sending n`` marks the batch going out now, which is
  what the counts call unknown if the child ends before it says more.

Why records wait as objects and are packed a batch at a time: with the young-generation GC
threshold raised while a pipeline records (:mod:`rollgym.telemetry.young_gc`), queued records
no longer make the process collect more often (``bench/shipper_hot_path.py``: 0 collections a
round either way), and marshalling a batch as one costs about a quarter of packing each record
as its span ends, in the writer thread instead of the event loop (measured in
docs/design/span-pipeline.md). A record holds nothing its span changes after ``end()``, and
the recording tracer keeps its own copy of every attribute value (sequences as tuples), so
what is packed is what the span held when it ended.

Loss is counted, never hidden and never blocking, and never called a loss when the backend may
have the spans: a full queue drops the new span (``queue_full``); a batch the backend refused
or that could not reach it, or one written to a child that died, is ``export_failed``; what
never went out by the shutdown limit is ``shutdown``; the batch going out or awaiting its
answer when the child is stopped (or dies) is ``unknown``
(:class:`~rollgym.telemetry.span_counts.SpanCounts`). Memory is
bounded by ``max_queue_size`` records here, one frame in the pipe and one batch in the child.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import IO, Any

from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE, SPAN_QUEUE_SIZE, SPAN_SCHEDULE_DELAY_MS
from rollgym.telemetry.pipeline.exporter_process import start_exporter
from rollgym.telemetry.pipeline.frames import HEADER, STOP_NOW, STOP_RETRYING, pack_batch
from rollgym.telemetry.pipeline.records import SpanRecord
from rollgym.telemetry.span_counts import (
    REASON_EXPORT_FAILED,
    REASON_QUEUE_FULL,
    REASON_SHUTDOWN,
    SpanCounts,
)

_log = logging.getLogger(__name__)


def pack_batch_safely(batch: list[SpanRecord]) -> tuple[bytes, int]:
    """``batch`` as one frame; also how many of its records were left out because ``marshal``
    refused them. Every attribute value was checked as it was set (``recording``), so only a
    field the API does not check can be refused, such as a span name that is not text given to
    ``update_name``: that span alone is lost, counted, and the rest of its batch goes."""
    try:
        return pack_batch(batch), 0
    except ValueError:
        pass
    kept: list[SpanRecord] = []
    for record in batch:
        try:
            marshal.dumps(record)
        except ValueError:
            continue
        kept.append(record)
    global _refusal_logged
    if not _refusal_logged:
        _refusal_logged = True
        _log.warning(
            "a span record held a value that is not an attribute and could not be packed "
            "(e.g. a span name that is not text); such spans are dropped and counted"
        )
    return pack_batch(kept), len(batch) - len(kept)


#: Whether this process has said that a record could not be packed (said once).
_refusal_logged = False


#: How long after the rollouts end an endpoint that accepts no connection is given to start
#: accepting before the unsent spans are given up (instead of waiting out the whole flush
#: limit). Counted from the end of the rollouts that :meth:`SpanShipper.stop_retrying_at` is
#: handed (else from shutdown), so a driver that shuts down after its servers did does not
#: wait the same seconds again.
SHUTDOWN_PROBE_S = 8.0
#: How long before the flush limit the child is told to stop (STOP_NOW), and how long it gets
#: before it is killed: time to break off its post and say what became of it.
STOP_NOW_S = 1.0


class RecordQueue:
    """The hot path both exporter sides share: a bounded queue of span records.

    :meth:`on_end` (called by ``RecordingSpan.end``): a length check, a ``deque.append`` of the
    record (atomic under the GIL, no lock) and once per batch an ``Event.set`` that wakes the
    side's worker thread. :class:`SpanShipper` ships the queue to
    its exporter child, :class:`~rollgym.telemetry.pipeline.in_process.InProcessExport` to an
    SDK exporter; each counts into its own :attr:`counts`.
    """

    def __init__(
        self, max_queue_size: int, max_export_batch_size: int, schedule_delay_ms: float
    ) -> None:
        #: Records of ended spans, oldest first.
        self._queue: deque[SpanRecord] = deque()
        self.counts = SpanCounts(self._queue)
        self._max_queue = max_queue_size
        self._batch = max(1, min(max_export_batch_size, max_queue_size))
        self._wake = threading.Event()
        self._delay_s = max(schedule_delay_ms, 1) / 1000
        self._closed = False
        #: Set when the side shuts down: its worker ships what is queued once more and ends.
        self._stopping = False

    def _drain(self, ship: Callable[[], None]) -> None:
        """The worker thread's loop: woken by a full batch or every ``schedule_delay_ms``,
        ``ship`` what is queued, until the side is stopping (then once more)."""
        while True:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            stopping = self._stopping
            ship()
            if stopping:
                return

    def on_end(self, record: SpanRecord) -> None:
        """Queue one finished span, or count it dropped; never blocks."""
        queue = self._queue
        size = len(queue)
        if size >= self._max_queue or self._closed:
            self.counts.drop(REASON_SHUTDOWN if self._closed else REASON_QUEUE_FULL)
            return
        queue.append(record)
        if size + 1 == self._batch:
            self._wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Ship everything queued now and wait (bounded) until the side answered for all of it.

        True when every span accepted so far has an outcome (exported or counted dropped).
        Returns at once with what holds when the side's worker is gone (or there never was
        one): nothing else would settle the rest.
        """
        deadline = time.monotonic() + timeout_s
        counts = self.counts
        while True:
            self._wake.set()
            with counts.lock:
                unsettled = counts.settled_short_of(counts.accepted)
                done = not self._queue and counts.handed == counts.accepted and unsettled <= 0
            if done or self._worker_gone():
                return done
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _worker_gone(self) -> bool:
        """Whether nothing works through the queue any more (each side says how it knows)."""
        raise NotImplementedError


class SpanShipper(RecordQueue):
    """Queue + exporter child for one process; see the module docstring."""

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str] | None,
        resource: Mapping[str, Any],
        timeout_s: float,
        patience_s: float = 0.0,
        compression: str | None = None,
        max_queue_size: int = SPAN_QUEUE_SIZE,
        max_export_batch_size: int = SPAN_EXPORT_BATCH_SIZE,
        schedule_delay_ms: float = SPAN_SCHEDULE_DELAY_MS,
        command: list[str] | None = None,
        idempotent: bool = False,
        records: bool = False,
        grpc: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(max_queue_size, max_export_batch_size, schedule_delay_ms)
        self._timeout_s = timeout_s
        self._patience_s = patience_s
        self._url = url
        #: Set by :meth:`stop_retrying_at`: when shutdown stops waiting for the child.
        self._deadline: float | None = None
        self._rollouts_ended_at: float | None = None
        #: Set at shutdown when nothing accepted a connection through the grace: the process's
        #: other exporters (metrics) to that endpoint need not retry either.
        self.gave_up_on_endpoint = False
        self._io_lock = threading.Lock()
        self._dead = False
        #: Set when this process ends the child (:meth:`stop_now`): what it never sent is then
        #: lost to the shutdown, not to an export failure.
        self._stopped_child = False
        self._child = start_exporter(command)  # forked where safe, else spawned
        assert self._child.stdin is not None and self._child.stdout is not None
        self._stdin: IO[bytes] = self._child.stdin
        config = {
            "url": url,
            "headers": dict(headers or {}),
            "timeout_s": float(timeout_s),
            "patience_s": float(patience_s),
            "compression": compression,
            "resource": dict(resource),
            "batch": self._batch,
            "idempotent": idempotent,
            # the run's own trace store: records as they are, no OTLP (``child`` docstring)
            "records": records,
            # OTLP/gRPC instead of OTLP/HTTP: the SDK gRPC exporter's keywords (``url`` is
            # then only where a shutdown probes whether anything listens)
            "grpc": None if grpc is None else dict(grpc),
        }
        self._write_frame(marshal.dumps(config))
        self._writer = threading.Thread(
            target=self._write_loop, name="rollgym-span-writer", daemon=True
        )
        self._reader = threading.Thread(
            target=self._read_loop,
            args=(self._child.stdout,),
            name="rollgym-span-acks",
            daemon=True,
        )
        self._writer.start()
        self._reader.start()

    # --- writer thread ------------------------------------------------------------------------
    def _write_loop(self) -> None:
        self._drain(self._ship_queued)
        with contextlib.suppress(OSError):  # end of input: the child finishes and exits
            self._stdin.close()

    def _ship_queued(self) -> None:
        queue, popleft, counts = self._queue, self._queue.popleft, self.counts
        while queue:
            n = min(len(queue), self._batch)
            batch = [popleft() for _ in range(n)]
            with counts.lock:
                counts.accepted += n
            frame, unpacked = pack_batch_safely(batch)
            if unpacked:  # refused as if never accepted: dropped, and not waited for by flush
                with counts.lock:
                    if not counts.closed:
                        counts.accepted -= unpacked
                        counts.dropped[REASON_EXPORT_FAILED] += unpacked
                n -= unpacked
                if n == 0:
                    continue
            with self._io_lock:
                if self._dead:
                    with counts.lock:
                        counts.drop_accepted(self._lost_reason(), n)
                    continue
                with counts.lock:
                    counts.handed += n
                try:
                    self._write_frame(frame)
                except (OSError, ValueError):  # the child died (broken pipe) or stdin closed
                    self._dead = True
                    if not self._stopped_child:
                        _log.warning("span exporter process is gone; further spans are dropped")
                    # What it was handed and never answered is settled by the reader once it
                    # has read the child's last lines (settled here, a batch the child still
                    # answered for would count twice).

    def _write_frame(self, frame: bytes) -> None:
        self._stdin.write(HEADER.pack(len(frame)))
        self._stdin.write(frame)
        self._stdin.flush()

    # --- reader thread ------------------------------------------------------------------------
    def _read_loop(self, stdout: IO[bytes]) -> None:
        counts = self.counts
        for line in stdout:
            word, _, number = line.partition(b" ")
            try:
                n = int(number)
            except ValueError:
                continue
            with counts.lock:
                if counts.closed:
                    continue
                if word == b"sending":
                    counts.in_flight = n
                    continue
                counts.in_flight = 0
                if word == b"ok":
                    counts.exported += n
                elif word == b"unknown":
                    counts.unknown += n
                elif word == b"unsent":
                    counts.drop_accepted(REASON_SHUTDOWN, n)
                elif word == b"fail":
                    counts.drop_accepted(REASON_EXPORT_FAILED, n)
                # "retrying": the attempt failed with nothing stored; the batch goes again
        with self._io_lock:  # the child is gone: what it was given and never answered is lost
            if not self._dead and not self._stopping:
                _log.warning("span exporter process exited; further spans are dropped")
            self._dead = True
            self._unresolved_failed()

    def _lost_reason(self) -> str:
        """Why spans the child never sent are lost: this process stopped the child at its
        flush limit, or the child died by itself."""
        return REASON_SHUTDOWN if self._stopped_child else REASON_EXPORT_FAILED

    def _unresolved_failed(self) -> None:
        """The child is gone: the batch it was sending is unknown, the rest it was handed and
        never sent is dropped."""
        counts = self.counts
        with counts.lock:
            if counts.closed:
                return
            counts.settle_in_flight()
            unresolved = counts.settled_short_of(counts.handed)
            if unresolved > 0:
                counts.drop_accepted(self._lost_reason(), unresolved)

    # --- lifecycle ----------------------------------------------------------------------------
    def _worker_gone(self) -> bool:
        return self._dead

    def stop_retrying_at(self, deadline: float, *, rollouts_ended_at: float | None = None) -> None:
        """The flush limit (monotonic): :meth:`shutdown` stops the child then, retrying or not.

        ``rollouts_ended_at`` (monotonic) is when the run's rollouts were over, as the
        :class:`~rollgym.telemetry.setup.TelemetryHandle` noted it: a dead endpoint's grace
        (:data:`SHUTDOWN_PROBE_S`) counts from then. The handle holds that one timestamp and
        hands it over here at shutdown, so the flush limit and the grace count from the same
        moment.
        """
        self._deadline = deadline
        self._rollouts_ended_at = rollouts_ended_at

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Ship the backlog, close the child's input, wait for its last answers (bounded).

        Blocking; :class:`~rollgym.telemetry.setup.TelemetryHandle` runs it on a helper thread
        under its own limit and counts what is left as dropped. A child that has not finished by
        ``timeout_s`` (default: the deadline given to :meth:`stop_retrying_at`, else the
        patience plus twice the export timeout plus five seconds) is killed.
        """
        if self._stopping:
            return
        self._stopping = True
        self._closed = True
        if timeout_s is not None:
            limit = timeout_s
        elif self._deadline is not None:
            limit = max(0.0, self._deadline - time.monotonic())
        else:
            limit = self._patience_s + 2 * self._timeout_s + 5.0
        end = time.monotonic() + limit
        # Near the limit the child stops retrying and answers the rest as failed at once.
        grace = min(2.0, 0.25 * limit)
        ended_at = self._rollouts_ended_at or time.monotonic()
        grace_left = max(0.0, SHUTDOWN_PROBE_S - (time.monotonic() - ended_at))
        if self._endpoint_down(within_s=min(grace_left, 0.5 * limit)):
            # Nothing listens at the end of the process either: waiting out the flush limit
            # would only delay the exit (a backend slow to start is up by now, and waited for).
            self.gave_up_on_endpoint = True
            with contextlib.suppress(OSError):
                self._child.send_signal(STOP_RETRYING)
        # At the limit itself the child is told to stop (it says what became of the batch it
        # was sending), and killed only if it does not within STOP_NOW_S.
        stop_at = end - min(STOP_NOW_S, 0.1 * limit)
        self._wake.set()
        self._writer.join(max(0.0, end - grace - time.monotonic()))
        if not self._finished_by(end - grace):
            with contextlib.suppress(OSError):
                self._child.send_signal(STOP_RETRYING)
            if not self._finished_by(stop_at):
                _log.warning("span exporter process did not finish within %.1fs; stopped", limit)
                self.stop_now(max(0.0, end - time.monotonic()))
        self._writer.join(max(0.0, end - time.monotonic()))
        self._reader.join(max(0.1, end - time.monotonic()))

    def stop_now(self, within_s: float = STOP_NOW_S) -> None:
        """End the child now: STOP_NOW, so it says what became of the batch it was sending, and
        SIGKILL if it has not ended ``within_s``; then wait (bounded) for its last lines, so the
        counts are final. Called at the flush limit, and by the telemetry handle when its own
        limit ran out first."""
        if not self._finished_by(time.monotonic()):
            self._stopped_child = True
            with contextlib.suppress(OSError):
                self._child.send_signal(STOP_NOW)
            if not self._finished_by(time.monotonic() + within_s):
                self._child.kill()
                self._child.wait()
        self._reader.join(STOP_NOW_S)

    def _endpoint_down(self, within_s: float) -> bool:
        """At shutdown, with spans still unanswered: does nothing accept a connection, even
        after ``within_s`` (a backend that is starting as the run ends gets that long)?"""
        if not self._queue and self.counts.settled_short_of(self.counts.accepted) <= 0:
            return False
        from rollgym.telemetry.endpoint_probe import unreachable

        give_up_at = time.monotonic() + within_s
        while unreachable(self._url, timeout_s=1.0) is not None:
            if time.monotonic() >= give_up_at:
                return True
            time.sleep(0.5)
        return False

    def _finished_by(self, when: float) -> bool:
        try:
            self._child.wait(max(0.0, when - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def child_pid(self) -> int:
        return self._child.pid
