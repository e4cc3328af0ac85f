"""The young-generation GC threshold a tracer provider rollgym built holds while it records."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator

import pytest

from rollgym.telemetry import young_gc
from rollgym.telemetry.groups import ALL_GROUPS
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import setup_telemetry


@pytest.fixture(autouse=True)
def _default_thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts from CPython's defaults and no holder (whatever earlier tests in this
    process left), and leaves the process as it found it."""
    saved, enabled = gc.get_threshold(), gc.isenabled()
    monkeypatch.setattr(young_gc, "_holds", young_gc._Holds())
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    assert young_gc._holds.count == 0, "a test left the threshold held"
    gc.set_threshold(*saved)
    if not enabled:
        gc.disable()


def test_hold_raises_only_the_young_threshold_and_release_puts_it_back() -> None:
    young_gc.hold()
    assert gc.get_threshold() == (young_gc.YOUNG_THRESHOLD, 10, 10)
    young_gc.release()
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_holds_keep_it_raised_until_the_last_release() -> None:
    young_gc.hold()
    young_gc.hold()
    young_gc.release()
    assert gc.get_threshold()[0] == young_gc.YOUNG_THRESHOLD
    young_gc.release()
    assert gc.get_threshold()[0] == 700
    young_gc.release()  # one too many: ignored
    assert gc.get_threshold()[0] == 700


def test_thresholds_someone_else_set_meanwhile_are_kept() -> None:
    young_gc.hold()
    gc.set_threshold(123, 4, 5)
    young_gc.release()
    assert gc.get_threshold() == (123, 4, 5)


@pytest.mark.parametrize("threshold", [0, 50_000])
def test_a_higher_or_disabled_threshold_is_never_lowered(threshold: int) -> None:
    gc.set_threshold(threshold, 10, 10)
    young_gc.hold()
    assert gc.get_threshold() == (threshold, 10, 10)
    young_gc.release()
    assert gc.get_threshold() == (threshold, 10, 10)


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    young_gc.hold()
    assert gc.get_threshold() == (700, 10, 10)
    young_gc.release()
    assert not gc.isenabled()
    gc.enable()


@pytest.mark.parametrize("exporter", ["otlp", "console"])
def test_a_provider_rollgym_builds_holds_it_until_shutdown(
    exporter: str, unreachable_otlp: TelemetrySettings
) -> None:
    """Both exporter sides: the child (OTLP/HTTP) and in-process (the console)."""
    settings = dataclasses.replace(unreachable_otlp, traces_exporter=exporter)
    handle = setup_telemetry(settings, service_name="t", run_id="r")
    try:
        assert handle.holds_young_gc
        assert gc.get_threshold()[0] == young_gc.YOUNG_THRESHOLD
    finally:
        handle.shutdown(10.0)
    assert gc.get_threshold()[0] == 700
    handle.shutdown(10.0)  # a second shutdown releases nothing more
    assert young_gc._holds.count == 0


def test_nothing_to_record_holds_nothing() -> None:
    settings = TelemetrySettings(groups=ALL_GROUPS, traces_exporter="none")
    handle = setup_telemetry(settings, service_name="t", run_id="r")
    try:
        assert not handle.holds_young_gc
        assert gc.get_threshold()[0] == 700
    finally:
        handle.shutdown(10.0)
