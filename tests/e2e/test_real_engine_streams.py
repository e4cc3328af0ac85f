"""llama.cpp's server cuts a stream short when another request arrives, and rollgym says so.

llama-cpp-python's server (``interrupt_requests``, on by default) ends a stream in progress
with ``data: [DONE]`` and no finish reason as soon as another request waits for the model.
An SDK agent of a real job (``sdk_agents:OverlappingStreamsAgent``) makes two overlapping
streamed calls through the ``openai`` proxy: the first is cut, and its turn is flagged
``incomplete: no_finish_reason``, counted in summary.json, and retried or accepted as
``run.incomplete_model_calls`` says. With ``--interrupt_requests False`` (what docs/builtins.md
says to run for RL) both answers are whole. Model seconds are counted for every SDK call.

llama-cpp-python builds from source (scripts/test.sh); without it these tests are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Job
from engine_support import llama_server
from tiny_gguf import write_tiny_llama

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e

ROWS = [{"question": "Count from one to twenty in words."}]


def _servers(engine_url: str) -> dict[str, object]:
    return {
        "engine": {"kind": "model", "url": engine_url},
        "policy": {"kind": "model", "impl": "openai", "upstream": "engine", "model_name": "tiny"},
        "sdk": {"kind": "agent", "impl": "sdk_agents:OverlappingStreamsAgent", "model": "policy"},
    }


def _job(root: Path, engine_url: str, **run: object) -> Job:
    job = Job(root)
    job.write(_servers(engine_url), ROWS, agent="sdk", trajectories=True, **run)
    result = job.run(timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return job


@pytest.fixture(scope="module")
def interrupting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server as it starts by default (``interrupt_requests`` on)."""
    folder = tmp_path_factory.mktemp("interrupting")
    with llama_server(folder, write_tiny_llama(folder / "tiny.gguf")) as url:
        yield url


def test_a_cut_stream_is_flagged_and_accepted_when_asked(interrupting: str, tmp_path: Path) -> None:
    job = _job(tmp_path, interrupting, incomplete_model_calls="accept", max_attempts=1)
    (line,) = job.records("trajectories.jsonl")
    first, second = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
    assert first["incomplete"] == "no_finish_reason" and first["finish_reason"] is None
    assert "incomplete" not in second and second["finish_reason"] in ("stop", "length")
    assert first["request_id"].endswith(".0") and second["request_id"].endswith(".1")
    (rollout,) = job.rollouts
    assert rollout["usage"]["incomplete_calls"] == 1 and rollout["usage"]["model_s"] > 0
    summary = job.summary
    assert summary["incomplete_model_calls"] == {
        "calls_in_results": 1,
        "results": 1,
        "failed_rollouts": 0,
    }
    assert summary["by_dispatch_name"]["sdk"]["usage"]["model_s"] > 0


def test_by_default_a_cut_stream_fails_the_rollout(interrupting: str, tmp_path: Path) -> None:
    job = _job(tmp_path, interrupting, max_attempts=2)
    assert job.rollouts == []
    (failure,) = job.failures
    assert failure["error_kind"] == "incomplete_model_call" and failure["attempt"] == 1
    assert job.summary["failed_by_kind"] == {"incomplete_model_call": 1}


def test_with_interrupts_off_both_answers_are_whole(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = tmp_path_factory.mktemp("uninterrupted")
    model = write_tiny_llama(folder / "tiny.gguf")
    with llama_server(folder, model, "--interrupt_requests", "False") as url:
        job = _job(folder / "job", url, max_attempts=1)
    (line,) = job.records("trajectories.jsonl")
    turns = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
    assert len(turns) == 2
    assert all("incomplete" not in t and t["finish_reason"] in ("stop", "length") for t in turns)
    assert "incomplete_model_calls" not in job.summary
    (rollout,) = job.rollouts
    assert rollout["reward"] == 1.0 and rollout["usage"]["model_s"] > 0
