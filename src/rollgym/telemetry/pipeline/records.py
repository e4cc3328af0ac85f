"""The compact span record: what a finished span becomes in the recording process.

Why a plain tuple: it is the cheapest object Python can build on the event loop, and
:mod:`marshal` turns it into bytes at C speed for the exporter child. The shipper packs each
record as its span ends (a tuple and its dicts are objects the garbage collector tracks for as
long as they live; bytes are not), so a record's objects live no longer than its span. The
fields, by position:

====  =====================  =================================================================
 0    trace_id               int (128 bit)
 1    span_id                int (64 bit)
 2    parent_span_id         int, 0 for a root
 3    parent_is_remote       bool
 4    name                   str
 5    kind                   int, ``opentelemetry.trace.SpanKind`` value
 6    start_time             int, ns since the epoch
 7    end_time               int, ns since the epoch
 8    attributes             dict of str -> str | bool | int | float | tuple of those
 9    events                 None or list of (name, time ns, attributes)
 10   links                  None or list of (trace_id, span_id, is_remote, attributes | None)
 11   status_code            int, ``StatusCode`` value (0 unset, 1 ok, 2 error)
 12   status_message         str or None
 13   scope                  (name, version or None, schema_url or None)
 14   trace_state            None or ((key, value), ...)
====  =====================  =================================================================
"""

from __future__ import annotations

from typing import Any, Final

SpanRecord = tuple[Any, ...]

TRACE_ID: Final = 0
SPAN_ID: Final = 1
PARENT_SPAN_ID: Final = 2
PARENT_IS_REMOTE: Final = 3
NAME: Final = 4
KIND: Final = 5
START: Final = 6
END: Final = 7
ATTRIBUTES: Final = 8
EVENTS: Final = 9
LINKS: Final = 10
STATUS_CODE: Final = 11
STATUS_MESSAGE: Final = 12
SCOPE: Final = 13
TRACE_STATE: Final = 14


def has_invalid_text(value: object) -> bool:
    """Whether ``value`` (a record, or any part of one) holds a text that is not valid
    Unicode: a lone surrogate, which user code can put in a span (Python's own ``json``
    parses ``"\\ud800"`` into one) and which neither UTF-8 nor OTLP can carry."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, tuple | list):
        return any(has_invalid_text(item) for item in value)
    if isinstance(value, dict):
        return any(has_invalid_text(k) or has_invalid_text(v) for k, v in value.items())
    return False


def valid_record(value: Any) -> Any:
    """``value`` (a record, or any part of one) with each lone surrogate in its texts, keys
    included, replaced by U+FFFD: one bad text costs its own characters, never the batch of
    other rollouts' spans it travels in. Called only once a batch was refused for it."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, tuple):
        return tuple(valid_record(item) for item in value)
    if isinstance(value, list):
        return [valid_record(item) for item in value]
    if isinstance(value, dict):
        return {valid_record(k): valid_record(v) for k, v in value.items()}
    return value
