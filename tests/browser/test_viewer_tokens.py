"""A model call's tokens on the rollout page, in headless Chromium, over a real run with
``run.capture_tokens``: every token's id, text and probability, the unlikely ones marked
under a threshold the page states and lets you change. Checked against trajectories.jsonl.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollgym.tracestore.store_process import TraceStoreProcess

from .conftest import BROWSER_MARKS, doc_shot, e2e_run_builder, open_view

pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return e2e_run_builder("insight_run", "tokens_run")(tmp_path_factory.mktemp("tokens"))


def _model_turns(run: Path, rollout_id: str) -> list[dict[str, Any]]:
    for raw in (run / "trajectories.jsonl").read_bytes().splitlines():
        line = orjson.loads(raw)
        if line["rollout_id"] == rollout_id:
            return [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
    raise AssertionError(f"no trajectory for {rollout_id}")


def test_rollout_page_shows_each_calls_tokens_and_marks_unlikely_ones(
    run: Path, store: TraceStoreProcess, page: Any
) -> None:
    turns = _model_turns(run, "1-0")
    open_view(page, store.endpoint + "/#/rollout/1-0")
    page.wait_for_selector("#conversation details.tokens")
    assert "p < " in page.inner_text(".token-threshold")
    assert page.input_value("#low-p") == "0.1"
    boxes = page.locator("#conversation details.tokens")
    assert boxes.count() == len(turns)
    first = boxes.nth(0)
    cells = first.locator(".token")
    assert cells.count() == len(turns[0]["completion_ids"])
    texts = cells.locator(".token-text").all_inner_texts()
    assert texts[-1] == "<|im_end|>"  # the toy tokenizer's text, aligned with the ids
    probabilities = [f"{math.exp(lp):.2f}" for lp in turns[0]["logprobs"]]
    assert cells.locator(".token-p").all_inner_texts() == probabilities
    assert f"id {turns[0]['completion_ids'][0]}" in (cells.nth(0).get_attribute("title") or "")
    assert page.locator(".token.low").count() == 0  # the simulated model: every p >= 0.5
    page.fill("#low-p", "0.7")
    page.dispatch_event("#low-p", "change")
    expected = sum(math.exp(lp) < 0.7 for t in turns for lp in t["logprobs"])
    assert expected > 0 and page.locator(".token.low").count() == expected
    low_first = sum(math.exp(lp) < 0.7 for lp in turns[0]["logprobs"])
    assert f"{low_first} with p < 0.7" in first.locator("summary").inner_text()
    doc_shot(page, "viewer-tokens.png", "#conversation")


def test_profile_page_says_what_http_covers(run: Path, store: TraceStoreProcess, page: Any) -> None:
    open_view(page, store.endpoint + "/#/profile")
    page.wait_for_selector("#http-parts tr.http-part")
    rows = page.locator("#http-parts tr.http-part")
    names = set(rows.evaluate_all("rs => rs.map(r => r.dataset.part)"))
    assert names == {"send", "receive", "server_framework", "untraced_server"}
    send = page.locator("#http-parts tr.http-part[data-part='send']").inner_text()
    assert "accept queue" in send and "replicas" in send
    assert "% of rollout time" in page.inner_text("#http-parts h3")
