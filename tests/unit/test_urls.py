"""Credentials in URLs are hidden wherever a URL is written: the helper and its users."""

from __future__ import annotations

from pathlib import Path

import yaml

from rollgym.config import load_config, redacted
from rollgym.telemetry import names
from rollgym.telemetry.spans import _address_attributes, _client_attributes
from rollgym.urls import has_credentials, redact_text, redact_url, without_credentials


def test_redact_url_uses_the_semconv_form_and_keeps_the_rest() -> None:
    assert redact_url("http://user:pa%40ss@host:8000/v1?x=1") == (
        "http://REDACTED:REDACTED@host:8000/v1?x=1"
    )
    assert redact_url("https://token@host/") == "https://REDACTED:REDACTED@host/"
    assert redact_url("http://127.0.0.1:9/run") == "http://127.0.0.1:9/run"
    assert redact_url("not a url @ all") == "not a url @ all"


def test_redact_text_hides_every_url_in_free_text() -> None:
    text = "GET http://a:b@h1:1/health failed; then https://c:d@h2/x; mail me@example.com"
    assert redact_text(text) == (
        "GET http://REDACTED:REDACTED@h1:1/health failed; then "
        "https://REDACTED:REDACTED@h2/x; mail me@example.com"
    )


def test_without_credentials_and_has_credentials() -> None:
    assert without_credentials("http://u:p@h:1/r") == "http://h:1/r"
    assert has_credentials("http://u:p@h:1/r") and not has_credentials("http://h:1/r")


def test_config_yaml_never_holds_a_url_password(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text("{}\n")
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "run": {"input": "rows.jsonl", "ray_address": "ray://admin:hunter2@head:10001"},
                "servers": {"solver": {"kind": "agent", "url": "http://bob:hunter2@10.0.0.5:80"}},
                "telemetry": {"endpoint": "https://otel:hunter2@collector:4318"},
            }
        )
    )
    dumped = yaml.safe_dump(redacted(load_config(path)))
    assert "hunter2" not in dumped and "bob" not in dumped
    assert "http://REDACTED:REDACTED@10.0.0.5:80" in dumped


def test_span_attributes_never_carry_a_url_password() -> None:
    client = _client_attributes("POST", "solver", "http://bob:hunter2@10.0.0.5:80/run", "/run")
    assert client[names.URL_FULL] == "http://REDACTED:REDACTED@10.0.0.5:80/run"
    assert client[names.SERVER_ADDRESS_HTTP] == "10.0.0.5"
    startup = _address_attributes("http://bob:hunter2@10.0.0.5:80")
    assert "hunter2" not in repr(startup) and startup[names.SERVER_PORT] == 80
