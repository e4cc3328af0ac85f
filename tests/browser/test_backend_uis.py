"""A rollout as each backend's own UI shows it: a real run exported to a real Phoenix and to a
real MLflow tracking server, one keychain walk opened in headless Chromium. Both derive their
span kinds from rollgym's ``gen_ai.operation.name``: the rollout an agent, its tool calls
tools, its model calls LLMs. ``ROLLGYM_SCREENSHOTS=1`` saves the pictures in docs/telemetry.md
("In your backend")."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from backends import mlflow_traces
from rollgym.telemetry import names
from waits import wait_for

from .conftest import BROWSER_MARKS, IMAGES, SHOTS

E2E = Path(__file__).resolve().parents[1] / "e2e"
pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


def _run_into(root: Path, endpoint: str, headers: str | None = None) -> list[dict[str, Any]]:
    """Two keychain walks by the ``walker`` agent, spans over OTLP to ``endpoint``; the
    run's rollout lines."""
    sys.path.insert(0, str(E2E))
    try:
        from telemetry_helpers import TracedJob, quick_rows, quick_servers
    finally:
        sys.path.remove(str(E2E))
    job = TracedJob(root)
    job.write(quick_servers(0.0), quick_rows(0, 2, 0), agent="solver")
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
    }
    if headers:
        env["OTEL_EXPORTER_OTLP_HEADERS"] = headers
    proc = job.run(env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return job.rollouts


def _spans_of(base: str, rollout_id: str) -> dict[str, dict[str, Any]]:
    """The spans of ``rollout_id`` by name, once Phoenix has its rollout and verify spans."""
    mine: dict[str, dict[str, Any]] = {}

    def shown() -> bool:
        url = f"{base}/v1/projects/default/spans?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as answer:
            spans = json.load(answer)["data"]
        mine.clear()
        mine.update(
            {s["name"]: s for s in spans if s["attributes"].get(names.ROLLOUT_ID) == rollout_id}
        )
        return names.SPAN_ROLLOUT in mine and names.SPAN_VERIFY in mine

    assert wait_for(shown, timeout=60, interval=0.5), "Phoenix did not show the rollout in 60 s"
    return mine


@pytest.mark.phoenix
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
    if SHOTS:
        page.screenshot(path=str(IMAGES / "phoenix-rollout.png"))
    page.screenshot(path=str(tmp_path / "phoenix-rollout.png"))
    # the reward, on the verify span
    page.goto(f"{phoenix}/redirects/spans/{spans[names.SPAN_VERIFY]['context']['span_id']}")
    page.wait_for_selector("text=gen_ai.evaluation.score.value", timeout=60_000)
    assert "gen_ai.evaluation.score.value" in page.inner_text("body")
    if SHOTS:
        page.screenshot(path=str(IMAGES / "phoenix-reward.png"))
    page.screenshot(path=str(tmp_path / "phoenix-reward.png"))


def _mlflow_trace_of(base: str, rollout_id: str) -> str:
    """MLflow's id of the trace of ``rollout_id``, once MLflow has its verify span."""
    found: list[str] = []

    def shown() -> bool:
        for trace in mlflow_traces(base):
            if any(
                s["name"] == names.SPAN_VERIFY
                and s["attributes"].get(names.ROLLOUT_ID) == rollout_id
                for s in trace["spans"]
            ):
                found.append(str(trace["trace_id"]))
                return True
        return False

    assert wait_for(shown, timeout=60, interval=1.0), "MLflow did not show the rollout in 60 s"
    return found[0]


def test_mlflow_shows_a_rollout_as_an_agent_with_tools_and_llm_calls(
    mlflow: str, page: Any, tmp_path: Path
) -> None:
    rollouts = _run_into(tmp_path / "run", mlflow, headers="x-mlflow-experiment-id=0")
    walk = max(rollouts, key=lambda r: r.get("tool_calls") or 0)
    trace_id = _mlflow_trace_of(mlflow, walk["rollout_id"])
    page.set_viewport_size({"width": 1500, "height": 1000})
    # the experiment's traces with this one open (MLflow's own link form)
    page.goto(f"{mlflow}/#/experiments/0/traces?selectedEvaluationId={trace_id}")
    page.wait_for_selector("text=gym.verify", timeout=60_000)
    body = page.inner_text("body")
    for name in (
        names.SPAN_DISPATCH,
        names.SPAN_ROLLOUT,
        names.SPAN_MODEL_CHAT,
        names.SPAN_ENV_TOOL,
    ):
        assert name in body
    assert "tokens" in body and walk["rollout_id"] in body  # the trace's usage, its session
    if SHOTS:
        page.screenshot(path=str(IMAGES / "mlflow-rollout.png"))
    page.screenshot(path=str(tmp_path / "mlflow-rollout.png"))
