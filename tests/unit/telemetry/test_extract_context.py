"""``extract_context``'s one-step read of a lone version-00 ``traceparent`` builds exactly the
context ``propagate.extract`` builds, and every other header set goes through ``propagate``."""

from __future__ import annotations

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context

from rollgym.telemetry.context import extract_context

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"

HEADERS = [
    {"traceparent": f"00-{TRACE}-{SPAN}-01"},
    {"traceparent": f"00-{TRACE}-{SPAN}-00", "host": "127.0.0.1:1", "x-request-id": "3-0-a0.0"},
    {"traceparent": f"00-{TRACE}-{SPAN}-ff"},
    {"traceparent": f"00-{'0' * 32}-{SPAN}-01"},
    {"traceparent": f"00-{TRACE}-{'0' * 16}-01"},
    {"traceparent": f"00-{TRACE.upper()}-{SPAN}-01"},
    {"traceparent": f" 00-{TRACE}-{SPAN}-01 "},
    {"traceparent": f"00-{TRACE}-{SPAN}-01-extra"},
    {"traceparent": f"01-{TRACE}-{SPAN}-01-extra"},
    {"traceparent": f"ff-{TRACE}-{SPAN}-01"},
    {"traceparent": f"00-{TRACE}-{SPAN}-1"},
    {"traceparent": f"00-{TRACE}-{SPAN}-01\n"},
    {"traceparent": ""},
    {"traceparent": "garbage"},
    {"traceparent": "0" * 600},
    {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "vendor=value,other=1"},
    {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": ""},
    {"traceparent": f"00-{TRACE}-{SPAN}-01", "baggage": "user=alice,tier=gold"},
    {"traceparent": f"00-{TRACE}-{SPAN}-01", "baggage": ""},
    {"baggage": "user=alice"},
    {},
]


def _shape(context: Context) -> tuple[object, ...]:
    span = trace.get_current_span(context)
    sc = span.get_span_context()
    return (
        sorted(context),
        type(span).__name__,
        sc.trace_id,
        sc.span_id,
        sc.is_remote,
        int(sc.trace_flags),
        type(sc.trace_flags).__name__,
        sc.trace_state.to_header(),
        dict(baggage.get_all(context)),
    )


@pytest.mark.parametrize("headers", HEADERS, ids=[str(h)[:60] for h in HEADERS])
def test_the_short_way_builds_what_the_propagator_builds(headers: dict[str, str]) -> None:
    assert _shape(extract_context(headers)) == _shape(propagate.extract(headers))
