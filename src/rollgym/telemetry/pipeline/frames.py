"""The protocol between the recording process and its exporter child: framing, one signal.

A frame is a 4-byte big-endian length, then that many bytes: the first the child's settings
(:mod:`marshal` data), every later one a batch of span records (:func:`pack_batch`): their
count, then the list marshalled as one. marshal (rather than pickle or JSON) because both ends
are the same interpreter build, it is the fastest serialiser CPython has for tuples of ints and
strings, and it cannot run code. A batch is marshalled whole, not record by record: the keys
and names its records share are written once and read back as one object each: half the
bytes, about a quarter of the CPU to pack (``bench/span_helpers.py``), and the store's reader
a quarter cheaper (``bench/decode.py``).

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
#: The layout of such a body: ``marshal`` of (this number, the resource's marshal bytes, the
#: marshal bytes of a list of records); a store that reads another number refuses the body
#: (400). Format 1 packed each record on its own.
RECORDS_FORMAT = 2
#: Ahead of a batch frame's records: how many there are, so the child can post a batch
#: without reading it.
COUNT = struct.Struct(">I")
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


def pack_batch(records: list[Any]) -> bytes:
    """A batch frame: the records' count, then the list marshalled as one (ValueError for a
    value marshal cannot write)."""
    return COUNT.pack(len(records)) + marshal.dumps(records)


def frame_count(frame: bytes) -> int:
    """How many records a batch frame holds, without reading them."""
    (count,) = COUNT.unpack_from(frame)
    return int(count)


def frame_records(frame: bytes) -> memoryview:
    """A batch frame's records as marshalled, not read (what a records body carries)."""
    return memoryview(frame)[COUNT.size :]


def unpack_frame(frame: bytes) -> list[tuple[Any, ...]]:
    """The span records of one batch frame."""
    records: list[tuple[Any, ...]] = marshal.loads(frame_records(frame))
    return records


def pack_records(resource: bytes, records: bytes | memoryview) -> bytes:
    """A :data:`RECORDS_TYPE` body: ``resource`` is the resource's marshal bytes, ``records``
    a list of records as :func:`pack_batch` marshalled it (never read on the way)."""
    return marshal.dumps((RECORDS_FORMAT, resource, records))
