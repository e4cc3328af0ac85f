"""A real OTLP/HTTP trace sink on loopback that counts the span ids it received whole.

Used to hold rollgym's span counts against what a backend actually got. It speaks HTTP/1.1 on
a plain socket (not ``http.server``) so that it can misbehave the ways real backends do:

- ``ok``: answers 200 at once;
- ``slow``: reads each request whole, counts its spans, and answers only ``answer_after_s``
  later (a backend that stores a large batch slowly: the client often gave up by then);
- ``tarpit``: accepts, reads each request slowly (``read_bytes_per_s``), counts its spans once
  the body is whole, and never answers;
- ``hangup``: reads each request whole, counts its spans, and closes the connection without
  an answer (a backend that crashed right after storing); with ``hangups``, only that many
  times, then it answers 200.

A span counts as received only when its request's body arrived whole and decoded as an
``ExportTraceServiceRequest`` (opentelemetry-proto): a backend cannot store half a request.
Metric requests (``/v1/metrics``) are answered 200 at once and not counted.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections import Counter
from types import TracebackType

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

MODES = ("ok", "slow", "tarpit", "hangup")


class OtlpSink:
    """Listens on 127.0.0.1 on a free port; ``url`` is the OTLP endpoint to export to."""

    def __init__(
        self,
        mode: str = "ok",
        *,
        answer_after_s: float = 30.0,
        read_bytes_per_s: int = 200_000,
        hangups: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode
        self.answer_after_s = answer_after_s
        self.read_bytes_per_s = read_bytes_per_s
        self._hangups_left = hangups
        self._lock = threading.Lock()
        self._received: Counter[bytes] = Counter()
        #: span id -> (trace id, wall-clock ns when it first arrived whole)
        self._first: dict[bytes, tuple[bytes, int]] = {}
        self.requests = 0
        self._stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    # --- what it received -------------------------------------------------------------------
    def span_ids(self) -> set[bytes]:
        """Every span id received whole at least once."""
        with self._lock:
            return set(self._received)

    def trace_ids(self) -> set[bytes]:
        """The trace ids of every span received whole."""
        with self._lock:
            return {trace_id for trace_id, _ in self._first.values()}

    def arrivals(self) -> dict[bytes, tuple[bytes, int]]:
        """span id -> (trace id, ``time.time_ns()`` when it first arrived whole)."""
        with self._lock:
            return dict(self._first)

    def duplicates(self) -> int:
        """How many spans were received more than once (a batch sent again)."""
        with self._lock:
            return sum(n - 1 for n in self._received.values() if n > 1)

    # --- serving ----------------------------------------------------------------------------
    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._listener.close()
        with self._lock:
            for connection in self._connections:
                connection.close()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        connection.settimeout(0.5)
        buffered = b""
        try:
            while not self._stopping.is_set():
                head, buffered = self._read_head(connection, buffered)
                if head is None:
                    return
                request_line, headers = head
                length = int(headers.get("content-length", "0"))
                body, buffered = self._read_body(connection, buffered, length)
                if body is None:
                    return
                if not request_line.split(" ")[1].startswith("/v1/traces"):
                    connection.sendall(_answer(200))
                    continue
                with self._lock:
                    self.requests += 1
                self._count(body, headers.get("content-encoding", ""))
                if self.mode == "tarpit":
                    self._hold(connection)
                    return
                if self.mode == "hangup" and self._hang_up():
                    return
                if self.mode == "slow" and not self._stopping.wait(self.answer_after_s):
                    pass
                connection.sendall(_answer(200))
        except OSError:
            return
        finally:
            connection.close()

    def _read_head(
        self, connection: socket.socket, buffered: bytes
    ) -> tuple[tuple[str, dict[str, str]] | None, bytes]:
        while b"\r\n\r\n" not in buffered:
            chunk = self._recv(connection, 65536)
            if not chunk:
                return None, b""
            buffered += chunk
        head, rest = buffered.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return (lines[0], headers), rest

    def _read_body(
        self, connection: socket.socket, buffered: bytes, length: int
    ) -> tuple[bytes | None, bytes]:
        slow = self.mode == "tarpit"
        while len(buffered) < length:
            chunk = self._recv(connection, 4096 if slow else 1 << 20)
            if not chunk:
                return None, b""  # the client went away: half a request stores nothing
            buffered += chunk
            if slow:
                time.sleep(len(chunk) / self.read_bytes_per_s)
        return buffered[:length], buffered[length:]

    def _recv(self, connection: socket.socket, size: int) -> bytes:
        """Bytes from the client; b"" when it closed (or the sink stops)."""
        while not self._stopping.is_set():
            try:
                return connection.recv(size)
            except TimeoutError:
                continue
        return b""

    def _hang_up(self) -> bool:
        with self._lock:
            if self._hangups_left is None:
                return True
            if self._hangups_left > 0:
                self._hangups_left -= 1
                return True
            return False

    def _hold(self, connection: socket.socket) -> None:
        """Never answer: keep the connection until the client closes it."""
        while self._recv(connection, 65536):
            pass

    def _count(self, body: bytes, encoding: str) -> None:
        if encoding == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        spans = [
            (span.span_id, span.trace_id)
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        now = time.time_ns()
        with self._lock:
            self._received.update(span_id for span_id, _ in spans)
            for span_id, trace_id in spans:
                self._first.setdefault(span_id, (trace_id, now))


def _answer(status: int) -> bytes:
    reason = {200: "OK"}.get(status, "Error")
    return f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n\r\n".encode()
