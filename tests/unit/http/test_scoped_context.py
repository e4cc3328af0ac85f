"""The trace context a rollout-scoped URL carries (``/r/<rollout id>/<traceparent>/v1``)."""

from __future__ import annotations

from rollgym.http.scoped_context import scoped_base, split_scoped_id, traceparent_in_path

TP = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def test_the_segment_after_the_rollout_id_is_the_context() -> None:
    assert split_scoped_id(f"3-0/{TP}") == ("3-0", TP)
    assert traceparent_in_path(f"/r/3-0/{TP}/v1/chat/completions") == TP
    assert traceparent_in_path(f"/r/3-0-a2/{TP}/v1/responses") == TP


def test_the_documented_form_carries_no_context_and_keeps_its_id() -> None:
    assert split_scoped_id("3-0") == ("3-0", None)
    assert traceparent_in_path("/r/3-0/v1/chat/completions") is None
    assert traceparent_in_path("/v1/chat/completions") is None
    # a rollout id that merely looks odd is never cut
    assert split_scoped_id("a/b") == ("a/b", None)
    assert split_scoped_id("00-zz/01") == ("00-zz/01", None)
    assert split_scoped_id(TP) == (TP, None)  # the id alone, no rollout id before it


def test_a_malformed_context_is_not_appended() -> None:
    assert scoped_base("http://m/r/3-0", TP) == f"http://m/r/3-0/{TP}"
    assert scoped_base("http://m/r/3-0", None) == "http://m/r/3-0"
    assert scoped_base("http://m/r/3-0", "00-nothex/../x") == "http://m/r/3-0"
