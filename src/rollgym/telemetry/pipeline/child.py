"""The exporter child: reads span-record frames on stdin, encodes OTLP, posts, reports on stdout.

Run as ``python -m rollgym.telemetry.pipeline.child`` by
:class:`~rollgym.telemetry.pipeline.shipper.SpanShipper`; it has its own interpreter and GIL,
so protobuf encoding and HTTP never compete with the recording process's event loop.

Protocol (all frames are a 4-byte big-endian length, then :mod:`marshal` bytes):

- first frame: a dict ``{"url", "headers", "timeout_s", "patience_s", "compression",
  "resource"}``;
- every later frame: a list of span records, posted as one ``ExportTraceServiceRequest``;
- for each frame it writes one line to stdout: ``ok <n>`` or ``fail <n>``.

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

import requests

from rollgym.telemetry.pipeline.frames import STOP_RETRYING, read_frame
from rollgym.telemetry.pipeline.wire import encode_request
from rollgym.urls import redact_url

_log = logging.getLogger("rollgym.telemetry.exporter")
_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 5.0
_stop_retrying = False


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
        self._session = requests.Session()
        self._failure_logged = False

    def post(self, body: bytes) -> bool:
        if self._gzip:
            body = gzip.compress(body, compresslevel=1)
        give_up_at = time.monotonic() + self._patience
        backoff = _FIRST_RETRY_S
        while True:
            try:
                answer = self._session.post(
                    self._url, data=body, headers=self._headers, timeout=self._timeout
                )
                if 200 <= answer.status_code < 300:
                    return True
                retry = answer.status_code == 429 or answer.status_code >= 500
                why = f"HTTP {answer.status_code}"
            except requests.RequestException as exc:
                retry = True
                why = type(exc).__name__
            if not retry or _stop_retrying or time.monotonic() + backoff >= give_up_at:
                if not self._failure_logged:
                    self._failure_logged = True
                    _log.warning(
                        "span export to %s failed (%s); further failures are counted, not logged",
                        redact_url(self._url),
                        why,
                    )
                return False
            _sleep(backoff)
            backoff = min(2 * backoff, _MAX_RETRY_S)


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
    while True:
        frame = read_frame(inp)
        if frame is None:
            return
        records = marshal.loads(frame)
        try:
            ok = poster.post(encode_request(resource, records))
        except Exception:  # an encoding bug loses this batch (counted), not the exporter
            _log.exception("encoding a batch of %d spans failed", len(records))
            ok = False
        out.write(b"%s %d\n" % (b"ok" if ok else b"fail", len(records)))
        out.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_RETRYING, _on_stop_retrying)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
