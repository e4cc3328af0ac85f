"""The exporter child reads requests' environment settings once, and keeps every one of them.

requests would read proxies, the CA bundle and ``~/.netrc`` again on every post (``trust_env``);
the child's session takes them at start, so each must still reach its posts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.telemetry.pipeline.transport import requests_session as _session_for

URL = "http://collector.example:4318/v1/traces"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC"):
        monkeypatch.delenv(name, raising=False)


def test_the_session_no_longer_reads_the_environment_per_post() -> None:
    assert _session_for(URL).trust_env is False


def test_a_proxy_from_the_environment_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert _session_for(URL).proxies.get("http") == "http://proxy.example:3128"


def test_no_proxy_still_exempts_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "collector.example")
    assert "http" not in _session_for(URL).proxies


def test_a_ca_bundle_from_the_environment_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    assert _session_for(URL.replace("http:", "https:")).verify == str(bundle)


def test_netrc_credentials_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine collector.example login exporter password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert _session_for(URL).auth == ("exporter", "s3cret")
