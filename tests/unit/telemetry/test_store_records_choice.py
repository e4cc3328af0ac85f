"""Span records go only to the run's own trace store over HTTP; every other destination, and
the run's store with ROLLGYM_STORE_OTLP=1, gets OTLP."""

from __future__ import annotations

import pytest

from rollgym.telemetry.pipeline.build import STORE_OTLP_ENV, posts_records
from rollgym.telemetry.settings import TelemetrySettings


def _settings(**fields: object) -> TelemetrySettings:
    return TelemetrySettings(traces_exporter="otlp", endpoint="http://127.0.0.1:4318", **fields)


def test_the_runs_own_store_gets_span_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_OTLP_ENV, raising=False)
    assert posts_records(_settings(to_local_store=True))


def test_any_other_backend_gets_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_OTLP_ENV, raising=False)
    assert not posts_records(_settings())
    assert not posts_records(_settings(to_local_store=True, protocol="grpc"))


def test_the_fallback_sends_otlp_to_the_runs_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_OTLP_ENV, "1")
    assert not posts_records(_settings(to_local_store=True))
