"""A rollout as Phoenix's own UI shows it: a real run exported to a real Phoenix, one keychain
walk opened in headless Chromium. Phoenix derives its span kinds from rollgym's
``gen_ai.operation.name``: the rollout an agent, its tool calls tools, its model calls LLMs.
``ROLLGYM_SCREENSHOTS=1`` saves the picture in docs/telemetry.md ("In your backend")."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import phoenix_server
from rollgym.telemetry import names

from .conftest import BROWSER_MARKS, IMAGES

E2E = Path(__file__).resolve().parents[1] / "e2e"
pytestmark = [*BROWSER_MARKS, pytest.mark.e2e, pytest.mark.phoenix]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("phoenix", reason="the 'phoenix' extra is not installed")
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as base:
        yield base


def _run_into(root: Path, endpoint: str) -> list[dict[str, Any]]:
    """Two keychain walks by the ``walker`` agent, spans over OTLP to ``endpoint``; the
    run's rollout lines."""
    sys.path.insert(0, str(E2E))
    try:
        from telemetry_helpers import TracedJob, quick_rows, quick_servers
    finally:
        sys.path.remove(str(E2E))
    job = TracedJob(root)
    job.write(quick_servers(0.0), quick_rows(0, 2, 0), agent="solver")
    proc = job.run(
        env={
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        }
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return job.rollouts


def _spans_of(base: str, rollout_id: str) -> dict[str, dict[str, Any]]:
    """The spans of ``rollout_id`` by name, once Phoenix has its rollout and verify spans."""
    deadline = time.monotonic() + 60
    while True:
        url = f"{base}/v1/projects/default/spans?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as answer:
            spans = json.load(answer)["data"]
        mine = {s["name"]: s for s in spans if s["attributes"].get(names.ROLLOUT_ID) == rollout_id}
        if names.SPAN_ROLLOUT in mine and names.SPAN_VERIFY in mine:
            return mine
        assert time.monotonic() < deadline, "Phoenix did not show the rollout in 60 s"
        time.sleep(0.5)


def test_phoenix_shows_a_rollout_as_an_agent_with_tools_llm_calls_and_reward(
    phoenix: str, page: Any, tmp_path: Path
) -> None:
    rollouts = _run_into(tmp_path / "run", phoenix)
    walk = max(rollouts, key=lambda r: r.get("tool_calls") or 0)
    spans = _spans_of(phoenix, walk["rollout_id"])
    page.set_viewport_size({"width": 1400, "height": 1500})
    # Phoenix's own link to a span by its OpenTelemetry id: the trace, that span selected
    page.goto(f"{phoenix}/redirects/spans/{spans[names.SPAN_ROLLOUT]['context']['span_id']}")
    page.wait_for_selector("text=gym.env.tool", timeout=60_000)
    page.wait_for_selector("text=invoke_agent", timeout=60_000)
    body = page.inner_text("body")
    for name in (names.SPAN_ROLLOUT, names.SPAN_MODEL_CHAT, names.SPAN_ENV_TOOL):
        assert name in body
    assert "AGENT" in body and walk["rollout_id"] in body  # the kind, the session id
    shots = os.environ.get("ROLLGYM_SCREENSHOTS") == "1"
    if shots:
        page.screenshot(path=str(IMAGES / "phoenix-rollout.png"))
    page.screenshot(path=str(tmp_path / "phoenix-rollout.png"))
    # the reward, on the verify span
    page.goto(f"{phoenix}/redirects/spans/{spans[names.SPAN_VERIFY]['context']['span_id']}")
    page.wait_for_selector("text=gen_ai.evaluation.score.value", timeout=60_000)
    assert "gen_ai.evaluation.score.value" in page.inner_text("body")
    if shots:
        page.screenshot(path=str(IMAGES / "phoenix-reward.png"))
    page.screenshot(path=str(tmp_path / "phoenix-reward.png"))
