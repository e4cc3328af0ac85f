"""``traces profile`` on a real run: what the ``http`` phase covers, split into parts with
what to change, and the timeline its help promises."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from e2e_support import Job
from insight_run import tokens_run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokens_run(tmp_path_factory.mktemp("profile"))


def _profile(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return Job(run.parent).cli("traces", "profile", str(run), *args)


def test_http_phase_is_split_into_parts_that_sum_to_it(run: Path) -> None:
    report = orjson.loads(_profile(run, "--json").stdout)
    http = next(p for p in report["phases"] if p["name"] == "http")
    parts = {p["name"]: p for p in report["http_parts"]}
    assert set(parts) == {"send", "receive", "server_framework", "untraced_server"}
    # the walker's calls never overlap: the parts tile the phase exactly
    assert sum(p["seconds"] for p in parts.values()) == pytest.approx(http["seconds"], rel=1e-6)
    assert parts["send"]["seconds"] > 0 and parts["receive"]["seconds"] > 0
    assert all(p["covers"] and p["change"] for p in parts.values())


def test_text_profile_says_what_http_covers_and_draws_a_timeline(run: Path) -> None:
    shown = _profile(run, "--bins", "20")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "http (" in out and "is time an HTTP span is the innermost one" in out
    for part in ("send", "receive", "server_framework", "untraced_server"):
        assert f"\n  {part} " in out
    assert "to change it:" in out
    timeline = out[out.index("timeline (") :].splitlines()
    assert timeline[0].startswith("timeline (20 bins")
    flight = timeline[1]
    assert flight.startswith("  in flight    |") and len(flight.split("|")[1]) == 20
    assert flight.split("|")[1].strip()  # rollouts were in flight
