"""The store's token rule: required beyond loopback, generated per run, the user's if set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollgym.config import TelemetryConfig, load_config
from rollgym.errors import ConfigError
from rollgym.tracestore.access import TOKEN_ENV, is_loopback, otel_headers_value, store_token


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("gpu-box", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_token_is_generated_beyond_loopback_only() -> None:
    assert store_token("127.0.0.1", {}) is None
    first, second = store_token("0.0.0.0", {}), store_token("0.0.0.0", {})
    assert first and second and first != second and len(first) >= 32


def test_the_users_token_wins_everywhere() -> None:
    assert store_token("127.0.0.1", {TOKEN_ENV: "mine"}) == "mine"
    assert store_token("0.0.0.0", {TOKEN_ENV: "mine"}) == "mine"


def test_the_header_value_is_url_encoded_as_otel_env_headers_are() -> None:
    from opentelemetry.util.re import parse_env_headers

    value = otel_headers_value("abc_-123")
    assert value == "authorization=Bearer%20abc_-123"
    assert dict(parse_env_headers(value, liberal=True)) == {"authorization": "Bearer abc_-123"}


@pytest.mark.parametrize(
    ("bind", "address"),
    [
        (None, ("127.0.0.1", 0)),
        ("0.0.0.0", ("0.0.0.0", 0)),
        ("0.0.0.0:4318", ("0.0.0.0", 4318)),
        ("[::]:4318", ("::", 4318)),
        ("::", ("::", 0)),
        ("gpu-box:9", ("gpu-box", 9)),
    ],
)
def test_store_bind_parses(bind: str | None, address: tuple[str, int]) -> None:
    assert TelemetryConfig(store_bind=bind).store_address() == address


@pytest.mark.parametrize("bind", ["host:port", ":4318", "h:70000"])
def test_a_bad_store_bind_names_the_file_and_key(tmp_path: Path, bind: str) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump({"run": {"input": str(rows)}, "telemetry": {"store_bind": bind}}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    assert raised.value.key_path == "telemetry.store_bind"
    assert str(config) in str(raised.value) and "host[:port]" in str(raised.value)


@pytest.mark.parametrize(
    ("announced", "local"),
    [
        ("http://0.0.0.0:4318", "http://127.0.0.1:4318"),
        ("http://[::]:4318", "http://127.0.0.1:4318"),
        ("http://127.0.0.1:5", "http://127.0.0.1:5"),
        ("http://gpu-box:9", "http://gpu-box:9"),
    ],
)
def test_this_machines_processes_reach_a_wildcard_bind_on_loopback(
    announced: str, local: str
) -> None:
    from rollgym.tracestore.store_process import _local_url

    assert _local_url(announced) == local
