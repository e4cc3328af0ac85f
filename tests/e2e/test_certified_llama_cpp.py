"""``rollgym traces check --data`` on a clean run against a real engine without spans:
llama.cpp's server (llama-cpp-python) serving a tiny local model through the ``openai`` proxy,
token capture on. The engine answers usage and log-probabilities but no token ids, so each
turn says its ids are missing and the answered usage is the record: every call's
log-probabilities must cover its usage's completion count, and every call must have a finish
reason. The clean run certifies with 0 violations.

llama-cpp-python builds from source (scripts/test.sh builds the wheel once per machine and
caches it); without it this test is skipped, saying so.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from e2e_support import traces_check
from engine_support import llama_server
from telemetry_helpers import TracedJob
from tiny_gguf import write_tiny_llama

from server_specs import proxied_servers

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e


def test_a_clean_llama_cpp_run_is_certified(tmp_path: Path) -> None:
    folder = tmp_path / "engine"
    folder.mkdir()
    with llama_server(folder, write_tiny_llama(folder / "tiny.gguf")) as url:
        job = TracedJob(tmp_path / "job")
        job.write(
            proxied_servers(url, "t", solver={"sampling": {"max_tokens": 8}}),
            [{"question": f"{i} + 2"} for i in range(4)],
            agent="solver",
            repeats=2,
            concurrency=2,
            timeout_s=300,
            capture_tokens=True,
        )
        done = job.run(timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert job.summary["completed"] == 8, job.failures
    check = traces_check(job.out, "--data", "--json", env=job.env())
    report = orjson.loads(check.stdout)
    assert check.returncode == 0, report["violations"]
    assert report["rollouts"] == 8 and report["model_calls"] == 8
    assert "holds no engine spans" in report["engine_record"]
    for line in job.records("trajectories.jsonl"):
        (turn,) = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        # what was held: the engine's log-probabilities against its own count
        assert turn["tokens_missing"] is True
        assert len(turn["logprobs"]) == turn["usage"]["completion_tokens"] >= 1
