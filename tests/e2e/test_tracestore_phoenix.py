"""A real third-party backend: export a synthetic run to Arize Phoenix and read it back.

Phoenix is started on loopback (its HTTP port serves OTLP/HTTP at /v1/traces; its gRPC port is
bound to a free loopback port because it cannot be switched off), with a temporary working
directory. Spans are read back through its REST API. Checked: parent-child structure, rollout
ids and GenAI attributes survive; span links do not (Phoenix's span model has no links).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rollgym.telemetry import names
from synthetic_run import emit_run
from waits import wait_for

pytestmark = [pytest.mark.phoenix, pytest.mark.e2e]
pytest.importorskip("phoenix")
# the ``phoenix`` fixture (tests/conftest.py) starts Phoenix on loopback


@pytest.fixture(autouse=True)
def _sdk_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/e2e/conftest.py disables the SDK for row tests; this test is about traces."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def _spans(base: str, expected: int) -> list[dict]:
    """What Phoenix shows once it holds ``expected`` spans (it ingests asynchronously), or
    after 30 s whatever it holds then."""
    data: list[dict] = []

    def holds_all() -> bool:
        url = base + "/v1/projects/default/spans?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as answer:
            data[:] = json.load(answer)["data"]
        return len(data) >= expected

    wait_for(holds_all, timeout=30, interval=0.5)
    return data


def test_phoenix_keeps_structure_ids_genai_but_drops_links(phoenix: str, tmp_path: Path) -> None:
    run = emit_run(lambda: OTLPSpanExporter(endpoint=phoenix + "/v1/traces"), rollouts=3)
    expected = 3 * 11 + 3 + 3  # rollouts, startup trace, job trace
    spans = _spans(phoenix, expected)
    assert len(spans) == expected
    by_id = {s["context"]["span_id"]: s for s in spans}
    for span in spans:  # every parent arrived, in the same trace
        if span["parent_id"]:
            parent = by_id[span["parent_id"]]
            assert parent["context"]["trace_id"] == span["context"]["trace_id"]
    dispatches = [s for s in spans if s["name"] == names.SPAN_DISPATCH]
    assert {s["attributes"][names.ROLLOUT_ID] for s in dispatches} == {"0-0", "1-0", "2-0"}
    for span in spans:
        rollout_id = span["attributes"].get(names.ROLLOUT_ID)
        if rollout_id is not None:
            root = next(
                d for d in dispatches if d["context"]["trace_id"] == span["context"]["trace_id"]
            )
            assert root["attributes"][names.ROLLOUT_ID] == rollout_id
    chat = next(s for s in spans if s["name"] == names.SPAN_MODEL_CHAT)
    for key in (
        names.GEN_AI_OPERATION_NAME,
        names.GEN_AI_REQUEST_MODEL,
        names.GEN_AI_RESPONSE_ID,
        names.GEN_AI_USAGE_INPUT_TOKENS,
        names.GEN_AI_USAGE_OUTPUT_TOKENS,
    ):
        assert key in chat["attributes"], key
    # What Phoenix loses: the dispatch -> job span link (no links in its span model).
    assert all("links" not in s for s in dispatches)
    assert run.job_trace_id in {s["context"]["trace_id"] for s in spans}
