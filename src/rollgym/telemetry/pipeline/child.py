"""The exporter child: reads span-record frames on stdin, encodes OTLP, posts, reports on stdout.

Run as ``python -m rollgym.telemetry.pipeline.child`` by
:class:`~rollgym.telemetry.pipeline.shipper.SpanShipper`; it has its own interpreter and GIL,
so protobuf encoding and HTTP never compete with the recording process's event loop.

Protocol (all frames are a 4-byte big-endian length, then :mod:`marshal` bytes):

- first frame: a dict ``{"url", "headers", "timeout_s", "compression", "resource"}``;
- every later frame: a list of span records, posted as one ``ExportTraceServiceRequest``;
- for each frame it writes one line to stdout: ``ok <n>`` or ``fail <n>``.

End of stdin means "finish and exit"; SIGINT is ignored (the parent decides when it ends), so a
Ctrl-C on the run does not lose the backlog. Export failures are answered, never raised.
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

from rollgym.telemetry.pipeline.frames import read_frame
from rollgym.telemetry.pipeline.wire import encode_request

_log = logging.getLogger("rollgym.telemetry.exporter")
#: HTTP statuses worth retrying (OTLP/HTTP spec: 429, 502, 503, 504).
_RETRYABLE = frozenset({429, 502, 503, 504})


class Poster:
    """POSTs encoded requests with bounded retries; after a failure, one try per batch.

    The first batch that fails is retried with backoff until ``timeout_s``; while the endpoint
    stays down, later batches get one attempt each, so a dead endpoint costs the backlog one
    timeout, not one per batch.
    """

    def __init__(
        self, url: str, headers: dict[str, str], timeout_s: float, compression: str | None
    ) -> None:
        self._url = url
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        if compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._gzip = compression == "gzip"
        self._timeout = timeout_s
        self._session = requests.Session()
        self._healthy = True

    def post(self, body: bytes) -> bool:
        if self._gzip:
            body = gzip.compress(body, compresslevel=1)
        deadline = time.monotonic() + self._timeout
        delay = 0.1
        while True:
            left = deadline - time.monotonic()
            retry = False
            try:
                answer = self._session.post(
                    self._url, data=body, headers=self._headers, timeout=max(left, 0.05)
                )
                if 200 <= answer.status_code < 300:
                    self._healthy = True
                    return True
                retry = answer.status_code in _RETRYABLE
                why = f"HTTP {answer.status_code}"
            except requests.RequestException as exc:
                retry = True
                why = type(exc).__name__
            if not retry or not self._healthy or time.monotonic() + delay >= deadline:
                if self._healthy:
                    _log.warning("span export to %s failed (%s)", self._url, why)
                self._healthy = False
                return False
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's loop; returns at end of input."""
    first = read_frame(inp)
    if first is None:
        return
    config: dict[str, Any] = marshal.loads(first)
    resource = config["resource"]
    poster = Poster(
        config["url"], config["headers"], config["timeout_s"], config.get("compression")
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
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
