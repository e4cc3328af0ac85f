"""The run views in headless Chromium, over two real runs: conversation, failures, filters,
comparison.

Two jobs run for real (the simulated model, the keychain environment, the tool-loop agent, an
agent that always fails and one that fails its first attempt): run A keeps trajectories, run B
does not. ``rollgym traces serve --run-dir A --compare B`` serves A; what the page shows is
checked against the files the runs wrote, read here independently of the viewer's code.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
from server_specs import walker_servers

from .conftest import BROWSER_MARKS, doc_shot, open_view

E2E = Path(__file__).resolve().parents[1] / "e2e"
pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]

SERVERS = walker_servers(
    broken={"kind": "agent", "impl": "agents:AlwaysFailAgent"},
    flaky={"kind": "agent", "impl": "agents:FailFirstAttemptAgent"},
)
ROWS: list[dict[str, Any]] = [
    *({"seed": seed, "hops": 1 + seed % 3} for seed in range(6)),
    {"agent": "broken", "q": "never answered"},
    {"agent": "flaky", "q": 1},
]
REPEATS = 2
MAX_ATTEMPTS = 2


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


#: Run A's recorder cap: every tool output ("next key: k-..." is 20 bytes) is cut and marked.
CAP_BYTES = 16


def _run(root: Path, accuracy: float, trajectories: bool) -> Path:
    sys.path.insert(0, str(E2E))
    try:
        from e2e_support import Job
    finally:
        sys.path.remove(str(E2E))
    job = Job(root)
    servers = {**SERVERS, "policy": {**SERVERS["policy"], "accuracy": accuracy}}
    if trajectories:
        servers["walker"] = {**SERVERS["walker"], "tool_output_max_bytes": CAP_BYTES}
    job.write(
        servers,
        ROWS,
        agent="walker",
        trajectories=trajectories,
        repeats=REPEATS,
        max_attempts=MAX_ATTEMPTS,
        telemetry={"preset": "default"},
    )
    done = job.run(timeout=400, telemetry=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return job.out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return (
        _run(tmp_path_factory.mktemp("run-a"), 0.8, trajectories=True),
        _run(tmp_path_factory.mktemp("run-b"), 0.3, trajectories=False),
    )


@pytest.fixture(scope="module")
def store(runs: tuple[Path, Path]) -> Iterator[TraceStoreProcess]:
    a, b = runs
    process = start_trace_store(
        a / "traces.db", a / "logs" / "viewer-compare.log", run_dir=a, compare_dir=b
    )
    try:
        yield process
    finally:
        process.stop()


def test_conversation_of_a_tool_rollout(
    store: TraceStoreProcess, runs: tuple[Path, Path], page: Any
) -> None:
    run_a, _ = runs
    lines = [t for t in _records(run_a / "trajectories.jsonl") if t["dispatch_name"] == "walker"]
    line = max(
        lines, key=lambda t: sum(turn["type"] == "tool" for turn in t["trajectory"]["turns"])
    )
    turns = line["trajectory"]["turns"]
    open_view(page, f"{store.endpoint}/#/rollout/{line['rollout_id']}")
    page.wait_for_selector("#conversation .entry")
    section = page.locator("#conversation")
    assert "from the run's trajectory" in section.inner_text()
    kinds = section.locator(".entry").evaluate_all("es => es.map(e => e.className)")
    assert "role-system" in kinds[0] and "role-user" in kinds[1]
    tools = [turn for turn in turns if turn["type"] == "tool"]
    shown_tools = section.locator(".entry.tool")
    assert shown_tools.count() == len(tools) >= 1
    for index, turn in enumerate(tools):
        text = shown_tools.nth(index).inner_text()
        assert turn["name"] in text and turn["output"].splitlines()[0] in text
        for value in turn["arguments"].values():
            assert str(value) in text
        assert turn["truncated"]  # the cap cut it: the page says so, with the whole size
        mark = shown_tools.nth(index).locator(".cut").inner_text()
        assert f"the whole text was {turn['output_bytes']} bytes" in mark
    models = [turn for turn in turns if turn["type"] == "model"]
    answers = section.locator(".entry.answer .call-figures")
    assert answers.count() == len(models)
    for index, turn in enumerate(models):
        figures = answers.nth(index).inner_text()
        assert f"tokens in {turn['usage']['prompt_tokens']}" in figures
        assert f"out {turn['usage']['completion_tokens']}" in figures
        assert "latency -" not in figures and " ms" in figures  # matched to its model span
    verify = section.locator(".entry.verify").inner_text()
    assert f"reward {line['reward']:.3f}" in verify
    # the waterfall under it: bars coloured by kind, a legend, tool spans named by their tool
    legend = page.locator(".kind-legend").first.inner_text()
    for label in ("driver", "agent", "model / engine", "tool", "verify", "environment"):
        assert label in legend
    tool_row = page.locator(".span-row[data-name='gym.env.tool']").first
    assert tool_row.get_attribute("data-kind") == "tool"
    assert f"tool {tools[0]['name']}" in tool_row.locator(".label").inner_text()
    colours = page.locator(".waterfall .bar").evaluate_all(
        "bars => [...new Set(bars.map(b => getComputedStyle(b).backgroundColor))]"
    )
    assert len(colours) >= 5, colours
    doc_shot(page, "viewer-conversation.png", "#conversation")
    doc_shot(page, "viewer-span-kinds.png", "section:has(.waterfall)")


def test_failed_rollout_says_why_at_the_top(
    store: TraceStoreProcess, runs: tuple[Path, Path], page: Any
) -> None:
    run_a, _ = runs
    failure = _records(run_a / "failures.jsonl")[0]
    open_view(page, f"{store.endpoint}/#/rollout/{failure['rollout_id']}")
    page.wait_for_selector("#rollout-error")
    error = page.locator("#rollout-error").inner_text()
    assert failure["error_kind"] in error and failure["message"] in error
    assert "failed before its agent returned a trajectory" in page.inner_text("#conversation")
    headers = page.locator("section.attempt h2").all_inner_texts()
    assert len(headers) == MAX_ATTEMPTS
    assert all("http_5xx" in h and "this agent always fails" in h for h in headers)


def test_failures_panel_and_filters_in_the_url(
    store: TraceStoreProcess, runs: tuple[Path, Path], page: Any
) -> None:
    run_a, _ = runs
    failures = _records(run_a / "failures.jsonl")
    broken_rows = sum(1 for row in ROWS if row.get("agent") == "broken")
    flaky_rows = sum(1 for row in ROWS if row.get("agent") == "flaky")
    assert len(failures) == broken_rows * REPEATS
    failed_attempts = broken_rows * REPEATS * MAX_ATTEMPTS + flaky_rows * REPEATS
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#failures .failure-group")
    counts = page.inner_text("#failure-counts")
    assert f"{len(failures)} rollouts finally failed" in counts
    assert f"{failed_attempts} attempts failed" in counts
    assert f"{flaky_rows * REPEATS} of those rollouts succeeded on a later attempt" in counts
    final = page.locator(".failure-groups.final .failure-group")
    by_kind = Counter(f["error_kind"] for f in failures)
    assert final.count() == len(by_kind)
    for kind, count in by_kind.items():
        row = page.locator(f".failure-groups.final .failure-group[data-kind='{kind}']")
        assert row.locator("td").nth(1).inner_text() == str(count)
        assert "this agent always fails" in row.inner_text()
    attempts_text = page.locator(".failure-groups.attempt").inner_text()
    assert "first attempts always fail here" in attempts_text  # a recovered rollout's attempt
    doc_shot(page, "viewer-failures.png", "#failures")

    # rollout level: the filter goes into the URL, and the URL alone reopens the same rows
    page.select_option("#failed-filter", "final")
    page.click("#filters button")
    page.wait_for_function("location.hash.includes('failed=final')")
    page.wait_for_selector("#counts-note")
    page.wait_for_function(
        f"document.querySelectorAll('#rollout-table tr.row').length === {len(failures)}"
    )
    shown = page.locator("#rollout-table tr.row").evaluate_all(
        "rs => rs.map(r => r.dataset.rollout)"
    )
    assert sorted(shown) == sorted(f["rollout_id"] for f in failures)
    assert "rollouts finally failed" in page.inner_text("#counts-note")
    url = page.url
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")
    page.goto(url)
    page.reload()
    page.wait_for_selector("#counts-note")
    again = page.locator("#rollout-table tr.row").evaluate_all(
        "rs => rs.map(r => r.dataset.rollout)"
    )
    assert sorted(again) == sorted(shown)
    assert page.locator("#failed-filter").input_value() == "final"

    # attempt level, with a second filter: both survive a reload
    open_view(page, f"{store.endpoint}/#/?failed=attempt&dispatch_name=flaky")
    page.reload()
    page.wait_for_selector("#counts-note")
    rows = page.locator("#rollout-table tr.row").evaluate_all(
        "rs => rs.map(r => r.dataset.rollout)"
    )
    assert len(rows) == flaky_rows * REPEATS and all(not r.endswith("-a1") for r in rows)
    assert "failed attempts" in page.inner_text("#counts-note")
    page.locator("#failures a.rollout-link").first.click()
    page.wait_for_selector("#conversation")
    assert "#/rollout/" in page.url


def test_comparison_of_the_two_runs(
    store: TraceStoreProcess, runs: tuple[Path, Path], page: Any
) -> None:
    from rollgym.reading.compare import compare_runs

    run_a, run_b = runs
    expected = compare_runs(run_a, run_b)
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#runs tr.run")
    listed = page.locator("#runs").inner_text()
    assert str(run_a) in listed and str(run_b) in listed
    page.click("#compare-link")
    page.wait_for_selector("#compare-dispatch tr.compare-row")
    for row in expected["by_dispatch"]:
        shown = page.locator(f"tr.compare-row[data-dispatch='{row['dispatch_name']}']")
        cells = shown.locator("td").all_inner_texts()
        assert cells[1] == f"{row['completed_a']}/{row['completed_b']}"
        for value, cell in ((row["reward_a"], cells[3]), (row["reward_b"], cells[4])):
            assert cell == ("-" if value is None else f"{value:.3f}")
        if row["reward_diff_ci"] is not None:
            low, high = row["reward_diff_ci"]
            assert f"[{low:+.3f}, {high:+.3f}]" in cells[5]
        assert cells[5].endswith("*") == row["significant"]
    # what differs between the two configs, above the tables: the model's accuracy among them
    keys = page.locator("#compare-config-diff tr.config-key").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert keys == [d["key"] for d in expected["config_differences"]]
    assert "servers.policy.accuracy" in keys and "run.trajectories" in keys
    flagged = [r["dispatch_name"] for r in expected["by_dispatch"] if r["significant"]]
    verdict = page.inner_text("#compare-verdict")
    assert verdict.endswith(", ".join(flagged) if flagged else "none")
    doc_shot(page, "viewer-compare.png")


def test_a_run_without_trajectories_says_how_to_keep_them(
    runs: tuple[Path, Path], page: Any
) -> None:
    _, run_b = runs
    process = start_trace_store(run_b / "traces.db", run_b / "logs" / "viewer.log", run_dir=run_b)
    try:
        done = next(r for r in _records(run_b / "rollouts.jsonl") if r["dispatch_name"] == "walker")
        open_view(page, f"{process.endpoint}/#/rollout/{done['rollout_id']}")
        page.wait_for_selector("#conversation-hint")
        assert "run.trajectories: true" in page.inner_text("#conversation-hint")
        assert page.locator("#conversation .entry").count() == 0
        open_view(page, f"{process.endpoint}/#/compare")
        page.wait_for_selector("#compare-error")
        assert "--compare" in page.inner_text("#compare-error")
    finally:
        process.stop()


def test_bad_requests_get_one_clear_json_line(store: TraceStoreProcess) -> None:
    import urllib.error
    import urllib.request

    for path, status, words in (
        ("/api/failed?level=sometimes", 400, "level must be final or attempt"),
        ("/api/failed?offset=x", 400, "offset and limit must be integers"),
        ("/api/conversation/no-such-rollout", 404, None),
    ):
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(store.endpoint + path, timeout=30)
        assert raised.value.code == status, path
        body = orjson.loads(raised.value.read())
        if words:
            assert body == {"error": words}
        else:
            assert body["conversation"] == [] and body["outcome"] is None


def test_search_finds_tool_calls_errors_and_message_text(
    runs: tuple[Path, Path], store: TraceStoreProcess, page: Any
) -> None:
    run_a, _ = runs
    trajectories = _records(run_a / "trajectories.jsonl")
    with_tools = {
        r["rollout_id"]
        for r in trajectories
        if any(t["type"] == "tool" and t["name"] == "read_key" for t in r["trajectory"]["turns"])
    }
    assert with_tools
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")
    page.fill("#search", "READ_KEY")  # a tool name, any case
    page.click("#search-form button")
    page.wait_for_selector("#search-hits tr.hit")
    hits = page.locator("#search-hits tr.hit")
    found = hits.evaluate_all("rows => rows.map(r => [r.dataset.rollout, r.dataset.where])")
    assert {rid for rid, where in found if where == "tool call"} == with_tools
    doc_shot(page, "viewer-search.png")
    # an error message: the always-failing agent's, as failures.jsonl and its spans hold it
    failed = {f["rollout_id"] for f in _records(run_a / "failures.jsonl")}
    page.fill("#search", "this agent always fails")
    page.click("#search-form button")
    page.wait_for_function(
        "document.querySelector('#search-results h2').textContent.includes('always fails')"
    )
    page.wait_for_selector("#search-hits tr.hit")
    found = hits.evaluate_all("rows => rows.map(r => [r.dataset.rollout, r.dataset.where])")
    assert {rid for rid, where in found if where == "error"} == failed
    assert any(where == "span error" for _, where in found)
    # message text: the user message of a walker rollout (cut at run A's 16-byte cap)
    record = next(r for r in trajectories if r["dispatch_name"] == "walker")
    first = next(t for t in record["trajectory"]["turns"] if t["type"] == "model")
    key = next(m["content"] for m in first["messages"] if m["role"] == "user")
    page.fill("#search", key)
    page.click("#search-form button")
    page.wait_for_function(
        f"document.querySelector('#search-results h2').textContent.includes('{key}')"
    )
    found = hits.evaluate_all("rows => rows.map(r => [r.dataset.rollout, r.dataset.where])")
    assert [record["rollout_id"], "user"] in found
    page.fill("#search", "no rollout says this")
    page.click("#search-form button")
    page.wait_for_selector("#search-none")
