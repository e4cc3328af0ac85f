"""The exporter child: reads span-record frames on stdin, encodes OTLP, posts, reports on stdout.

OTLP/HTTP (the run's trace store, any OTLP/HTTP backend) is encoded here (:mod:`.wire`) and
posted (:mod:`.transport`); OTLP/gRPC (config key ``grpc``: the SDK exporter's keywords) hands
the same records, as ``ReadableSpan`` s, to the SDK's gRPC exporter (:func:`_serve_grpc`).

Started by :class:`~rollgym.telemetry.pipeline.shipper.SpanShipper` through
:func:`~rollgym.telemetry.pipeline.exporter_process.start_exporter`: forked from the recording process where that is safe (one thread
runs: a server just forked by the fork server, before its metrics thread starts), which
shares the modules already imported instead of importing them again (a spawned child cost
0.1-0.2 s of CPU before its server was healthy); else, and with ``ROLLGYM_FORK_SERVER=0``,
run as ``python -m rollgym.telemetry.pipeline.child``. Either way it is a process of its own
with its own GIL, so protobuf encoding and HTTP never compete with the recording process's
event loop.

Protocol (all frames are a 4-byte big-endian length, then that many bytes):

- first frame: a dict ``{"url", "headers", "timeout_s", "patience_s", "compression",
  "resource"}``, marshalled;
- every later frame: a batch of span records, their count and then the list marshalled as
  one (:func:`~rollgym.telemetry.pipeline.frames.pack_batch`), posted as
  ``ExportTraceServiceRequest`` s of at most the current batch size (:class:`BatchSize`);
  to the run's own trace store (config key ``records``) a batch within that size is posted
  as it came, never read (:data:`~rollgym.telemetry.pipeline.frames.RECORDS_TYPE`): the
  store turns records into rows itself, so neither side pays for OTLP;
- for each request it writes lines to stdout: ``sending <n>`` as each attempt starts to go
  out (from then on the backend may get it), ``retrying <n>`` when that attempt failed without
  the backend storing anything (nothing went whole, or an error answer), and one verdict:
  ``ok <n>``, ``fail <n>``, ``unknown <n>`` or ``unsent <n>``.

``unknown``: the whole request was sent and no answer came (the request timeout ran out, or
the connection broke after the request went out). A slow backend (MLflow's OTLP endpoint with
default settings, measured: every 4,096-span request ran past 10 s) often stores such a batch
anyway, so it is neither counted as delivered nor as dropped, and it is not sent again (that
would store it twice). After such a timeout the batch size halves (down to :data:`MIN_BATCH`)
and the request timeout doubles (up to :data:`MAX_TIMEOUT_FACTOR` times the configured one),
so the rest of the run fits. ``unsent``: never went out whole because the parent stopped the
child (its flush limit).

Signals, so that the parent's counts stay true and the child never outlives the parent:

- SIGINT is ignored (the parent decides when it ends), so a Ctrl-C on the run does not lose
  the backlog;
- SIGUSR1 (:data:`~rollgym.telemetry.pipeline.frames.STOP_RETRYING`, sent near the parent's
  flush limit) ends retrying, so what is left is tried once;
- SIGTERM (:data:`~rollgym.telemetry.pipeline.frames.STOP_NOW`, the parent's flush limit)
  breaks the post in progress and ends the child: a request that had gone out whole is
  answered ``unknown``, one half sent ``unsent``, and nothing more is read;
- the parent's death (``PR_SET_PDEATHSIG`` with :data:`PARENT_DIED`, armed here; or a broken
  pipe on stdout) stops retrying, drops the answer of the request in flight (it went out; no
  one reads the answer), posts what is left in the pipe once each for at most
  :data:`DRAIN_S`, and exits quietly. ``SIGALRM`` (its default action ends the process) is the
  backstop for a backend that holds even that. A process whose parent dies never prints a
  traceback or waits out a slow backend.

Export failures are answered, never raised.
"""

from __future__ import annotations

import gzip
import logging
import marshal
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from rollgym.child_process import libc
from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE
from rollgym.telemetry.pipeline.frames import (
    RECORDS_TYPE,
    STOP_NOW,
    STOP_RETRYING,
    frame_count,
    frame_records,
    pack_records,
    read_frame,
    unpack_frame,
)
from rollgym.telemetry.pipeline.native import encode_request
from rollgym.telemetry.pipeline.records import valid_record
from rollgym.telemetry.pipeline.transport import NoAnswer, NotSent, transport_for
from rollgym.urls import redact_url

_log = logging.getLogger("rollgym.telemetry.exporter")
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 5.0
#: The smallest request the batch size halves down to after timeouts.
MIN_BATCH = 32
#: The request timeout grows after a timeout, up to this many times the configured one.
MAX_TIMEOUT_FACTOR = 4.0
OK, FAIL, UNKNOWN, UNSENT = "ok", "fail", "unknown", "unsent"
#: Progress lines (module docstring): an attempt is going out; it failed and goes again.
SENDING, RETRYING = "sending", "retrying"
#: The signal the kernel sends this child when its parent dies (``PR_SET_PDEATHSIG``).
PARENT_DIED = signal.SIGUSR2
#: How long a child whose parent died still posts what is left in its pipe.
DRAIN_S = 3.0
_PR_SET_PDEATHSIG = 1


class _Stopped(BaseException):
    """Raised by the STOP_NOW handler while the loop waits for the next frame."""


class _Life:
    """What the signal handlers change and the loop reads: one instance, :data:`_life`."""

    def __init__(self) -> None:
        self.stop_retrying = False
        self.stop_now = False
        #: The parent's pid, read at start; a parent-death signal while it still is the
        #: parent came from the end of the thread that started this child, not the process.
        self.parent = 0
        #: Monotonic time until which a child whose parent died still posts; None while the
        #: parent lives.
        self.drain_until: float | None = None
        #: True while the loop waits on stdin for the next frame (a STOP_NOW then raises).
        self.reading = False
        self.poster: Poster | None = None
        self.answers: Answers | None = None

    def time_left(self) -> float | None:
        """Seconds left to post once the parent died; None while it lives."""
        if self.drain_until is None:
            return None
        return self.drain_until - time.monotonic()

    def parent_gone(self) -> None:
        """Nobody reads the answers any more: stop retrying, give up waiting on the request in
        flight (it went out), post what is left for :data:`DRAIN_S`, then end."""
        if self.drain_until is not None:
            return
        self.stop_retrying = True
        self.drain_until = time.monotonic() + DRAIN_S
        signal.alarm(int(DRAIN_S) + 2)  # the backstop: SIGALRM's default action ends us
        if self.answers is not None:
            self.answers.mute()
        if self.poster is not None and self.poster.awaiting_answer:
            self.poster.abort()


_life = _Life()


class Answers:
    """The lines to the parent on stdout; muted (sent to /dev/null) once the parent is gone,
    so a late answer never raises ``BrokenPipeError``."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._muted = False

    def say(self, word: str, n: int) -> None:
        if self._muted:
            return
        try:
            self._out.write(b"%s %d\n" % (word.encode(), n))
            self._out.flush()
        except (OSError, ValueError):  # the parent closed its end: it is gone
            _life.parent_gone()

    def about(self, n: int) -> Callable[[str], None]:
        """``say`` for one batch of ``n`` spans (the progress lines of its attempts)."""
        return lambda word: self.say(word, n)

    def mute(self) -> None:
        if self._muted:
            return
        self._muted = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._out.fileno())  # buffered bytes and any late write go nowhere
            os.close(null)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        """Flush what is left, quietly: a parent that went meanwhile reads nothing."""
        try:
            self._out.flush()
        except (OSError, ValueError):
            self.mute()


class BatchSize:
    """Spans per request and the request timeout, both adapted after a backend timed out."""

    def __init__(self, spans: int, timeout_s: float) -> None:
        self.spans = max(1, spans)
        self.timeout_s = timeout_s
        self._max_timeout_s = timeout_s * MAX_TIMEOUT_FACTOR

    def timed_out(self, unanswered: int) -> None:
        """A request of ``unanswered`` spans got no answer within the timeout."""
        if self.spans > MIN_BATCH or self.timeout_s < self._max_timeout_s:
            _log.warning(
                "span export: the backend did not answer %d spans within %.0f s; sending "
                "%d per request with a %.0f s timeout from now on",
                unanswered,
                self.timeout_s,
                max(MIN_BATCH, self.spans // 2),
                min(self._max_timeout_s, 2 * self.timeout_s),
            )
        self.spans = max(min(MIN_BATCH, self.spans), self.spans // 2)
        self.timeout_s = min(self._max_timeout_s, 2 * self.timeout_s)


class Poster:
    """POSTs encoded requests; a failed batch is tried again with backoff for ``patience_s``.

    The same patience as the SDK path (``telemetry.flush_timeout_s``): a backend merely slow to
    start loses nothing. Retried: a request that did not go out whole, 429 and 5xx (and, to
    an idempotent backend, one whose connection broke after it went out); any other answer (a
    4xx: the payload or the credentials are wrong) fails the batch at once. The parent stops
    the whole process at its flush limit, so a retry never outlives a shutdown.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        compression: str | None,
        patience_s: float = 0.0,
        idempotent: bool = False,
        content_type: str = "application/x-protobuf",
    ) -> None:
        self._url = url
        #: The backend keeps a span once however often it is sent (the run's own trace store:
        #: ``INSERT OR IGNORE`` on trace and span id), so a request whose connection broke
        #: after it went out is sent again rather than left unknown.
        self._idempotent = idempotent
        headers = {"Content-Type": content_type, **headers}
        if compression == "gzip":
            headers["Content-Encoding"] = "gzip"
        self._gzip = compression == "gzip"
        self._timeout = timeout_s
        self._patience = patience_s
        self._transport = transport_for(url, headers)
        self._failure_logged = False
        #: True while a request is out whole and its answer awaited (read by signal handlers).
        self.awaiting_answer = False
        #: Whether the last ``unknown`` was a read timeout (the batch size adapts to those).
        self.timed_out = False

    def post(
        self,
        body: bytes,
        timeout_s: float | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> str:
        """:data:`OK`, :data:`FAIL`, :data:`UNKNOWN` (sent whole, no answer) or :data:`UNSENT`
        (stopped by the parent before it went out whole). ``progress`` hears :data:`SENDING`
        and :data:`RETRYING` for each attempt (the parent counts a batch going out when the
        child ends as unknown: the backend may have got it)."""
        if self._gzip:
            body = gzip.compress(body, compresslevel=1)
        give_up_at = time.monotonic() + self._patience
        backoff = _FIRST_RETRY_S
        self.timed_out = False
        #: An attempt went out whole and its connection broke before an answer: the backend
        #: may have stored it, so the batch can no longer end as certainly not delivered.
        maybe_stored = False
        while True:
            if _life.stop_now:
                return UNKNOWN if maybe_stored else UNSENT
            # (connect, read): a dead host is found out in the connect part; the read part is
            # what a slow backend needs; both capped by what is left once the parent died
            timeout = self._timeouts(timeout_s)
            if progress is not None:
                progress(SENDING)
            try:
                status = self._send(body, timeout)
                if 200 <= status < 300:
                    return OK
                # 507: the backend's disk is full (rollgym's store), not worth waiting for
                retry = status == 429 or (status >= 500 and status != 507)
                why = f"HTTP {status}"
            except NoAnswer as exc:
                self.timed_out = exc.timed_out
                if exc.timed_out or not self._idempotent or _life.stop_now:
                    if _life.drain_until is None and not _life.stop_now:
                        self._log_once(
                            f"no answer within {timeout[1]:.0f} s" if exc.timed_out else str(exc)
                        )
                    return UNKNOWN  # sent whole; sending it again could store it twice
                maybe_stored = True  # the run's own store keeps a span once: send it again
                retry = True
                why = str(exc)
            except NotSent as exc:
                if _life.stop_now:  # the parent's limit broke it off half sent
                    return UNKNOWN if maybe_stored else UNSENT
                retry = True
                why = str(exc)
            if not retry or _life.stop_retrying or time.monotonic() + backoff >= give_up_at:
                self._log_once(why)
                return UNKNOWN if maybe_stored else FAIL
            if progress is not None and not maybe_stored:
                progress(RETRYING)  # (once maybe stored, it stays "going out" for the parent)
            _sleep(backoff)
            backoff = min(2 * backoff, _MAX_RETRY_S)

    def _send(self, body: bytes, timeout: tuple[float, float]) -> int:
        self.awaiting_answer = False
        try:
            return self._transport.post(body, timeout, self._sent)
        finally:
            self.awaiting_answer = False

    def _sent(self) -> None:
        self.awaiting_answer = True

    def _timeouts(self, read_s: float | None) -> tuple[float, float]:
        connect_s, read_s = min(self._timeout, 5.0), read_s or self._timeout
        left = _life.time_left()
        if left is not None:
            connect_s, read_s = max(0.1, min(connect_s, left)), max(0.1, min(read_s, left))
        return connect_s, read_s

    def abort(self) -> None:
        """Break the request in progress (from a signal handler)."""
        self._transport.abort()

    def _log_once(self, why: str) -> None:
        if not self._failure_logged and _life.drain_until is None:
            self._failure_logged = True
            _log.warning(
                "span export to %s failed (%s); further failures are counted, not logged",
                redact_url(self._url),
                why,
            )


def _sleep(seconds: float) -> None:
    """Sleep, but wake within 50 ms of a :data:`STOP_RETRYING` signal."""
    end = time.monotonic() + seconds
    while not _life.stop_retrying and time.monotonic() < end:
        time.sleep(min(0.05, end - time.monotonic()))


def _on_stop_retrying(signum: int, frame: object) -> None:
    _life.stop_retrying = True


def _on_stop_now(signum: int, frame: object) -> None:
    _life.stop_retrying = True
    _life.stop_now = True
    if _life.poster is not None:
        _life.poster.abort()
    if _life.reading:
        raise _Stopped


def _on_parent_died(signum: int, frame: object) -> None:
    if os.getppid() == _life.parent:
        return  # the thread that started this child ended; the parent process lives on
    _life.parent_gone()


def _read_next(inp: BinaryIO) -> bytes | None:
    """The next frame, or None at end of input or once the parent stopped this child."""
    _life.reading = True
    try:
        if _life.stop_now:
            return None
        return read_frame(inp)
    finally:
        _life.reading = False


def _ended() -> bool:
    left = _life.time_left()
    return _life.stop_now or (left is not None and left <= 0)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's loop; returns at end of input, at STOP_NOW, or when the parent's death
    leaves no more time."""
    answers = Answers(out)
    _life.answers = answers
    try:
        _serve(inp, answers)
    except _Stopped:
        pass
    finally:
        answers.close()


def _serve(inp: BinaryIO, answers: Answers) -> None:
    first = _read_next(inp)
    if first is None:
        return
    config: dict[str, Any] = marshal.loads(first)
    resource = config["resource"]
    if config.get("grpc") is not None:
        _serve_grpc(inp, answers, resource, config["grpc"], config.get("batch", 0))
        return
    #: The run's own trace store: the records go as they came, no OTLP (module docstring).
    records = bool(config.get("records", False))
    poster = Poster(
        config["url"],
        config["headers"],
        config["timeout_s"],
        config.get("compression"),
        config.get("patience_s", 0.0),
        config.get("idempotent", False),
        RECORDS_TYPE if records else "application/x-protobuf",
    )
    _life.poster = poster
    size = BatchSize(config.get("batch", SPAN_EXPORT_BATCH_SIZE), config["timeout_s"])
    encode = records_encoder(resource) if records else otlp_encoder(resource)
    while not _ended():
        frame = _read_next(inp)
        if frame is None:
            return
        count = frame_count(frame)
        # Records to the run's own store, a batch within the size: posted as packed, not read.
        whole = frame_records(frame) if records and count <= size.spans else None
        batch = unpack_frame(frame) if whole is None else []
        start = 0
        while start < count:
            if _ended():
                answers.say(UNSENT, count - start)
                return
            part = batch[start : start + size.spans]
            n = count if whole is not None else len(part)
            start += n
            try:
                body = encode(whole if whole is not None else part)
            except Exception:  # an encoding bug loses this batch (counted), not the exporter
                _log.exception("encoding a batch of %d spans failed", n)
                answers.say(FAIL, n)
                continue
            verdict = poster.post(body, size.timeout_s, answers.about(n))
            if verdict == UNKNOWN and poster.timed_out and _life.drain_until is None:
                size.timed_out(n)
            answers.say(verdict, n)


def otlp_encoder(resource: dict[str, Any]) -> Callable[[Any], bytes]:
    """Unpacked records -> an OTLP ``ExportTraceServiceRequest``. A record holding a text that
    is not valid Unicode (a lone surrogate, from user code) is sent with each such character
    replaced by U+FFFD rather than costing the whole batch (:func:`.records.valid_record`)."""

    def encode(part: list[Any]) -> bytes:
        try:
            body: bytes = encode_request(resource, part)
        except UnicodeEncodeError:
            body = encode_request(resource, valid_record(part))
        return body

    return encode


def records_encoder(resource: dict[str, Any]) -> Callable[[Any], bytes]:
    """A batch's records, as the frame packed them (never read here), or a part of a batch
    the child split (a list of records) -> a records body for the run's own store."""
    packed_resource = marshal.dumps(resource)

    def encode(part: list[Any] | memoryview) -> bytes:
        packed = part if isinstance(part, memoryview) else marshal.dumps(part)
        return pack_records(packed_resource, packed)

    return encode


def _serve_grpc(
    inp: BinaryIO,
    answers: Answers,
    resource: dict[str, Any],
    options: dict[str, Any],
    batch: int,
) -> None:
    """OTLP/gRPC: the same records, as the SDK's ``ReadableSpan`` s (:mod:`.readable`), handed
    to the SDK's gRPC exporter, which retries within its own timeout. Its answer is success
    or failure only: a batch it gave up on is ``fail`` (the SDK cannot tell a batch the
    backend never got from one it got and did not answer). Imported only here: a child for
    OTLP/HTTP never loads the SDK or gRPC."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExportResult

    from rollgym.telemetry.pipeline.readable import export_spans, readable_span

    exporter = OTLPSpanExporter(**options)
    identity = Resource(resource)
    size = max(1, batch or SPAN_EXPORT_BATCH_SIZE)
    try:
        while not _ended():
            frame = _read_next(inp)
            if frame is None:
                return
            records = unpack_frame(frame)
            for start in range(0, len(records), size):
                if _ended():
                    answers.say(UNSENT, len(records) - start)
                    return
                part = records[start : start + size]
                try:
                    spans = [readable_span(record, identity) for record in part]
                except Exception:  # a conversion bug loses this batch (counted), not the child
                    _log.exception("converting a batch of %d spans failed", len(part))
                    answers.say(FAIL, len(part))
                    continue
                answers.say(SENDING, len(part))
                try:
                    result = export_spans(exporter, spans, part, identity)
                    delivered = result is SpanExportResult.SUCCESS
                except Exception:
                    _log.exception("the gRPC span exporter failed")
                    delivered = False
                answers.say(OK if delivered else FAIL, len(part))
    finally:
        exporter.shutdown()


def arm_parent_death_signal() -> None:
    """Ask the kernel for :data:`PARENT_DIED` when the parent dies (Linux), and notice a parent
    that died before this took effect."""
    _life.parent = os.getppid()
    if not sys.platform.startswith("linux"):
        return
    try:
        libc().prctl(_PR_SET_PDEATHSIG, PARENT_DIED, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != _life.parent:
        _life.parent_gone()


def run(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's whole life, spawned or forked: its signals, its log, its loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_RETRYING, _on_stop_retrying)
    signal.signal(STOP_NOW, _on_stop_now)
    signal.signal(PARENT_DIED, _on_parent_died)
    # One plain line a record, like the driver's own: not logging's "WARNING:name:" default.
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="rollgym: telemetry: %(message)s"
    )
    arm_parent_death_signal()
    serve(inp, out)


def main() -> None:
    run(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
