"""Server-Timing: the header's format and parse, the request scope, and the usage it feeds."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

import rollgym.server_timing as server_timing
from rollgym.server_timing import (
    ENGINE,
    SANDBOX,
    Timings,
    collecting,
    note,
    note_header,
    parse_header,
)
from rollgym.trajectory.usage import USAGE_KEY, UsageTally, attach_usage


def test_format_then_parse_round_trips_in_seconds() -> None:
    value = server_timing.format_header({"engine": 0.8124, "sandbox": 0.03105})
    assert value == "engine;dur=812.400, sandbox;dur=31.050"
    assert parse_header(value) == pytest.approx({"engine": 0.8124, "sandbox": 0.03105})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('engine;desc="vLLM";dur=250', {"engine": 0.25}),  # other parameters skipped
        ("engine;dur=100, engine;dur=50", {"engine": 0.15}),  # repeated names summed
        ("cache, engine;dur=1e3", {"engine": 1.0}),  # a metric without dur is skipped
        ("engine;dur=-5, sandbox;dur=abc, ;dur=3", {}),  # malformed: never an error
        ("engine;durx=5, engine; dur = 7", {"engine": 0.007}),
        ("", {}),
    ],
)
def test_parse_takes_what_is_valid_and_skips_the_rest(
    value: str, expected: dict[str, float]
) -> None:
    assert parse_header(value) == pytest.approx(expected)


def test_notes_reach_only_the_open_scope() -> None:
    note(ENGINE, 5.0)  # no scope: nothing happens, nothing raises
    with collecting() as outer:
        note(ENGINE, 0.5)
        with collecting() as inner:  # a nested request's scope keeps its own seconds
            note(SANDBOX, 0.25)
        note_header("engine;dur=250, sandbox;dur=100")
        note_header(None)
    assert outer.seconds == pytest.approx({ENGINE: 0.75, SANDBOX: 0.1})
    assert inner.seconds == pytest.approx({SANDBOX: 0.25})
    assert server_timing.current() is None
    assert outer.header() == {"Server-Timing": "engine;dur=750.000, sandbox;dur=100.000"}
    assert server_timing.Timings().header() == {}


def test_tasks_and_threads_of_the_scope_add_to_the_same_totals() -> None:
    async def rollout() -> server_timing.Timings:
        with collecting() as timings:

            async def call() -> None:
                await asyncio.sleep(0)
                note(ENGINE, 1.0)

            await asyncio.gather(call(), call())
            await asyncio.to_thread(note, SANDBOX, 2.0)
            plain = threading.Thread(target=note, args=(SANDBOX, 9.0))  # no context: not counted
            plain.start()
            plain.join()
        return timings

    assert asyncio.run(rollout()).seconds == {ENGINE: 2.0, SANDBOX: 2.0}


def test_usage_holds_engine_and_sandbox_seconds_only_where_reported() -> None:
    tally = UsageTally()
    tally.add({"usage": {"prompt_tokens": 3, "completion_tokens": 1}}, 0.5)
    assert "engine_s" not in tally.to_json() and "sandbox_s" not in tally.to_json()
    with collecting(tally.timings):
        note_header("engine;dur=400")
        note_header("engine;dur=50")
        note(SANDBOX, 0.125)
    usage = tally.to_json()
    assert usage["engine_s"] == pytest.approx(0.45) and usage["sandbox_s"] == 0.125
    assert usage["model_s"] == 0.5 and usage["model_calls"] == 1


def test_sandbox_seconds_alone_are_attached() -> None:
    tally = UsageTally()
    assert attach_usage({"reward": 0.0}, tally) == {"reward": 0.0}
    tally.timings.add(SANDBOX, 0.2)
    assert attach_usage({"reward": 0.0}, tally)[USAGE_KEY] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "model_calls": 0,
        "model_s": 0.0,
        "sandbox_s": 0.2,
    }


def test_threads_adding_at_once_lose_no_second() -> None:
    """A blocking SDK client's worker threads note their seconds at once: every one counts."""
    timings = Timings()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a lost update shows
    try:
        workers = [
            threading.Thread(target=lambda: [timings.add(ENGINE, 1.0) for _ in range(20_000)])
            for _ in range(8)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert timings.get(ENGINE) == 160_000.0
