"""The ``http`` phase's parts on hand-built traces with known answers: each part is the
time the attribution gives ``http``, split by where it lies against the server's span."""

from __future__ import annotations

import pytest

from rollgym.reading.profile_http import PARTS, HttpTotals, http_parts
from rollgym.reading.profile_phases import PHASE_INDEX, SpanRecord, attribute_dispatch
from rollgym.reading.profile_timeline import spark, timeline_lines
from rollgym.telemetry import names

from .span_builder import MS
from .span_builder import span as _span

CLIENT, SERVER = 3, 2


def _parts(root: SpanRecord, spans: list[SpanRecord]) -> dict[str, float]:
    return {name: ns / MS for name, ns in zip(PARTS, http_parts(root, spans), strict=True)}


def test_parts_split_the_http_phase_by_where_the_server_span_lies() -> None:
    root = _span(names.SPAN_DISPATCH, 0, 100, None)
    client = _span("POST /run", 1, 99, root, CLIENT, client_queue_s=0.002)  # pool wait 1-3
    server = _span("POST /run", 10, 90, client, SERVER, server_kind="agent")
    rollout = _span(names.SPAN_ROLLOUT, 12, 88, server)
    untraced = _span("POST /v1/chat/completions", 20, 30, rollout, CLIENT)
    spans = [root, client, server, rollout, untraced]
    parts = _parts(root, spans)
    assert parts == {
        "send": 7.0,  # 3-10: after the pool wait, before the agent's span began
        "receive": 9.0,  # 90-99: after the agent's span ended
        "server_framework": 4.0,  # 10-12 and 88-90: the agent's server span outside its handler
        "untraced_server": 10.0,  # a call whose server recorded no span
    }
    profile = attribute_dispatch(root, spans)
    assert profile.phase_ns[PHASE_INDEX["http"]] / MS == pytest.approx(sum(parts.values()))
    assert profile.phase_ns[PHASE_INDEX["client_queue"]] / MS == pytest.approx(2.0)


def test_model_server_spans_are_not_http_but_the_wire_to_them_is() -> None:
    root = _span(names.SPAN_DISPATCH, 0, 50, None)
    client = _span("POST /r/x/v1/chat/completions", 0, 50, root, CLIENT)
    _span("never", 60, 70, root)  # outside the window: clipped away
    served = _span("POST /r/x/v1/chat/completions", 5, 45, client, SERVER, server_kind="model")
    parts = _parts(root, [root, client, served])
    assert parts == {"send": 5.0, "receive": 5.0, "server_framework": 0.0, "untraced_server": 0.0}


def test_totals_report_shares_and_what_to_change() -> None:
    totals = HttpTotals()
    totals.add([3 * MS, 1 * MS, 0, 0])
    rows = {row["name"]: row for row in totals.report()}
    assert rows["send"]["share"] == pytest.approx(0.75)
    assert "replicas" in str(rows["send"]["change"]) and rows["send"]["covers"]


def test_timeline_lines_draw_in_flight_and_completions() -> None:
    points = [
        {"t_s": i * 0.5, "width_s": 0.5, "in_flight": value, "completions_per_s": done}
        for i, (value, done) in enumerate([(0, 0), (4, 0), (8, 2), (1, 6)])
    ]
    lines = timeline_lines(points)
    assert lines[1].endswith("| peak 8.0") and "|" + spark([0, 4, 8, 1], 8) + "|" in lines[1]
    assert spark([0, 4, 8, 1], 8) == " ▄█▁"  # one rollout in flight is never blank
    assert "peak 6.0/s" in lines[2] and "2 s" in lines[3]
    assert timeline_lines([]) == []
