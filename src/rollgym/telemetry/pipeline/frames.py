"""The protocol between the recording process and its exporter child: framing, one signal.

A frame is a 4-byte big-endian length, then that many bytes of :mod:`marshal` data: the first
the child's settings, every later one a list of span records, each packed on its own
(:func:`pack_record`) when its span ended. marshal (rather than pickle or JSON) because both
ends are the same interpreter build, it is the fastest serialiser CPython has for tuples of
ints and strings, and it cannot run code.

The child's side of the wire is here too: the OTLP/HTTP paths it posts to and the content type
of a span-records body, which the trace store imports from here to receive them (this module
loads nothing, so the store does not load the telemetry config to know its own routes).
"""

from __future__ import annotations

import marshal
import signal
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")
#: The OTLP/HTTP paths, one a signal: what the exporters add to a base URL and where the trace
#: store receives (span records are posted to the same traces path).
TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
#: Content-Type of a request body of span records, posted by the exporter child to the run's
#: own trace store only (``tracestore.record_rows`` turns them into rows there): the records
#: skip OTLP's encoding here and its decoding in the store. Every other destination, and
#: every foreign sender to the store (engines), speaks OTLP.
RECORDS_TYPE = "application/x-rollgym-span-records"
#: The layout of such a body: ``marshal`` of (this number, the resource's marshal bytes, a
#: list of packed records); a store that reads another number refuses the body (400).
RECORDS_FORMAT = 1
#: Sent by the parent near its flush limit: from then on the child tries every batch once.
STOP_RETRYING = signal.SIGUSR1
#: Sent by the parent at its flush limit: the child breaks off the post in progress, says
#: what became of it, and ends (before the parent's SIGKILL, which would leave that unknown).
STOP_NOW = signal.SIGTERM


def frame(payload: bytes) -> bytes:
    """Header and payload as one buffer: one write, never interleaved."""
    return HEADER.pack(len(payload)) + payload


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame's payload, or None at end of stream (a truncated frame is also the end)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


#: One span record as bytes (raises ValueError for a value marshal cannot write).
pack_record = marshal.dumps


def pack_records(resource: bytes, packed: list[bytes]) -> bytes:
    """A :data:`RECORDS_TYPE` body: ``resource`` is the resource's marshal bytes, ``packed``
    the records as :func:`pack_record` made them (never unpacked on the way)."""
    return marshal.dumps((RECORDS_FORMAT, resource, packed))


def unpack_frame(frame: bytes) -> list[tuple[Any, ...]]:
    """The span records of one frame: a marshalled list of :func:`pack_record` bytes."""
    loads = marshal.loads
    return [loads(packed) for packed in loads(frame)]
