"""The exporter child: reads span-record frames on stdin, encodes OTLP, posts, reports on stdout.

Started by :class:`~rollgym.telemetry.pipeline.shipper.SpanShipper` through
:func:`~rollgym.telemetry.pipeline.exporter_process.start_exporter`: forked from the recording process where that is safe (one thread
runs: a server just forked by the fork server, before its metrics thread starts), which
shares the modules already imported instead of importing them again (a spawned child cost
0.1-0.2 s of CPU before its server was healthy); else, and with ``ROLLGYM_FORK_SERVER=0``,
run as ``python -m rollgym.telemetry.pipeline.child``. Either way it is a process of its own
with its own GIL, so protobuf encoding and HTTP never compete with the recording process's
event loop.

Protocol (all frames are a 4-byte big-endian length, then :mod:`marshal` bytes):

- first frame: a dict ``{"url", "headers", "timeout_s", "patience_s", "compression",
  "resource"}``;
- every later frame: a list of span records, each marshalled on its own as its span ended
  (:func:`~rollgym.telemetry.pipeline.frames.unpack_frame`), posted as
  ``ExportTraceServiceRequest`` s of at most the current batch size (:class:`BatchSize`);
- for each request it writes one line to stdout: ``ok <n>``, ``fail <n>`` or ``unknown <n>``.

``unknown``: the whole request was sent and the backend did not answer within the request
timeout. A slow backend (MLflow's OTLP endpoint with default settings, measured: every
4,096-span request ran past 10 s) often stores such a batch anyway, so it is neither counted
as delivered nor as dropped, and it is not sent again (that would store it twice). After such
a timeout the batch size halves (down to :data:`MIN_BATCH`) and the request timeout doubles
(up to :data:`MAX_TIMEOUT_FACTOR` times the configured one), so the rest of the run fits.

End of stdin means "finish and exit"; SIGINT is ignored (the parent decides when it ends), so a
Ctrl-C on the run does not lose the backlog; SIGUSR1 (:data:`STOP_RETRYING`, sent at the
parent's flush limit) ends retrying, so what is left is answered ``fail`` at once. Export
failures are answered, never raised.
"""

from __future__ import annotations

import gzip
import logging
import marshal
import signal
import sys
import time
from typing import Any, BinaryIO

from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE
from rollgym.telemetry.pipeline.frames import STOP_RETRYING, read_frame, unpack_frame
from rollgym.telemetry.pipeline.native import encode_request
from rollgym.telemetry.pipeline.transport import NoAnswer, NotSent, transport_for
from rollgym.urls import redact_url

_log = logging.getLogger("rollgym.telemetry.exporter")
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 5.0
#: The smallest request the batch size halves down to after timeouts.
MIN_BATCH = 32
#: The request timeout grows after a timeout, up to this many times the configured one.
MAX_TIMEOUT_FACTOR = 4.0
OK, FAIL, UNKNOWN = "ok", "fail", "unknown"
_stop_retrying = False


class BatchSize:
    """Spans per request and the request timeout, both adapted after a backend timed out."""

    def __init__(self, spans: int, timeout_s: float) -> None:
        self.spans = max(1, spans)
        self.timeout_s = timeout_s
        self._max_timeout_s = timeout_s * MAX_TIMEOUT_FACTOR

    def timed_out(self) -> None:
        if self.spans > MIN_BATCH or self.timeout_s < self._max_timeout_s:
            _log.warning(
                "span export: the backend did not answer %d spans within %.0f s; sending "
                "%d per request with a %.0f s timeout from now on",
                self.spans,
                self.timeout_s,
                max(MIN_BATCH, self.spans // 2),
                min(self._max_timeout_s, 2 * self.timeout_s),
            )
        self.spans = max(min(MIN_BATCH, self.spans), self.spans // 2)
        self.timeout_s = min(self._max_timeout_s, 2 * self.timeout_s)


class Poster:
    """POSTs encoded requests; a failed batch is tried again with backoff for ``patience_s``.

    The same patience as the SDK path (``telemetry.flush_timeout_s``): a backend merely slow to
    start loses nothing. Retried: connection errors, timeouts, 429 and 5xx; any other answer
    (a 4xx: the payload or the credentials are wrong) fails the batch at once. The parent stops
    the whole process at its flush limit, so a retry never outlives a shutdown.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        compression: str | None,
        patience_s: float = 0.0,
    ) -> None:
        self._url = url
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        if compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._gzip = compression == "gzip"
        self._timeout = timeout_s
        self._patience = patience_s
        self._transport = transport_for(url)
        self._failure_logged = False

    def post(self, body: bytes, timeout_s: float | None = None) -> str:
        """:data:`OK`, :data:`FAIL`, or :data:`UNKNOWN` (sent whole, no answer in time)."""
        if self._gzip:
            body = gzip.compress(body, compresslevel=1)
        give_up_at = time.monotonic() + self._patience
        backoff = _FIRST_RETRY_S
        # (connect, read): a dead host is found out in the connect part; the read part is
        # what a slow backend needs
        timeout = (min(self._timeout, 5.0), timeout_s or self._timeout)
        while True:
            try:
                status = self._transport.post(body, self._headers, timeout)
                if 200 <= status < 300:
                    return OK
                # 507: the backend's disk is full (rollgym's store), not worth waiting for
                retry = status == 429 or (status >= 500 and status != 507)
                why = f"HTTP {status}"
            except NoAnswer:
                self._log_once(f"no answer within {timeout[1]:.0f} s")
                return UNKNOWN  # sent whole; sending it again could store it twice
            except NotSent as exc:
                retry = True
                why = str(exc)
            if not retry or _stop_retrying or time.monotonic() + backoff >= give_up_at:
                self._log_once(why)
                return FAIL
            _sleep(backoff)
            backoff = min(2 * backoff, _MAX_RETRY_S)

    def _log_once(self, why: str) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            _log.warning(
                "span export to %s failed (%s); further failures are counted, not logged",
                redact_url(self._url),
                why,
            )


def _sleep(seconds: float) -> None:
    """Sleep, but wake within 50 ms of a :data:`STOP_RETRYING` signal."""
    end = time.monotonic() + seconds
    while not _stop_retrying and time.monotonic() < end:
        time.sleep(min(0.05, end - time.monotonic()))


def _on_stop_retrying(signum: int, frame: object) -> None:
    global _stop_retrying
    _stop_retrying = True


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's loop; returns at end of input."""
    first = read_frame(inp)
    if first is None:
        return
    config: dict[str, Any] = marshal.loads(first)
    resource = config["resource"]
    poster = Poster(
        config["url"],
        config["headers"],
        config["timeout_s"],
        config.get("compression"),
        config.get("patience_s", 0.0),
    )
    size = BatchSize(config.get("batch", SPAN_EXPORT_BATCH_SIZE), config["timeout_s"])
    while True:
        frame = read_frame(inp)
        if frame is None:
            return
        records = unpack_frame(frame)
        start = 0
        while start < len(records):
            part = records[start : start + size.spans]
            start += len(part)
            try:
                verdict = poster.post(encode_request(resource, part), size.timeout_s)
            except Exception:  # an encoding bug loses this batch (counted), not the exporter
                _log.exception("encoding a batch of %d spans failed", len(part))
                verdict = FAIL
            if verdict == UNKNOWN:
                size.timed_out()
            out.write(b"%s %d\n" % (verdict.encode(), len(part)))
            out.flush()


def run(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's whole life, spawned or forked: its signals, its log, its loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_RETRYING, _on_stop_retrying)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(inp, out)


def main() -> None:
    run(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
