"""A turn's tokens on screen: ``traces show --conversation --tokens`` on a real run.

Real servers (the simulated model with its toy tokenizer, the keychain environment, the
tool-loop agent) write a run with ``run.capture_tokens``; the terminal's token lines are read
back and compared with the ids and log-probabilities the trajectory holds, recomputed here.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from e2e_support import Job

from rollgym.builtins.models import toy_tokenizer
from server_specs import walker_servers

pytestmark = pytest.mark.e2e


def _model_turns(job: Job, rollout_id: str) -> list[dict[str, Any]]:
    (line,) = [t for t in job.records("trajectories.jsonl") if t["rollout_id"] == rollout_id]
    return [t for t in line["trajectory"]["turns"] if t["type"] == "model"]


def test_tokens_of_each_turn_with_text_and_low_probability_marks(job: Job) -> None:
    rows = [{"seed": seed, "hops": 2} for seed in range(3)]
    job.write(walker_servers(), rows, agent="walker", capture_tokens=True)
    done = job.run(timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    turns = _model_turns(job, "1-0")
    shown = job.cli("traces", "show", str(job.out), "1-0", "--conversation", "--tokens")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    # one token line per model call, with the threshold said
    assert out.count("tokens: ") == len(turns)
    assert "with p < 0.1 (marked !)" in out and "text from the toy tokenizer" in out
    first = turns[0]
    pieces = toy_tokenizer.generated_pieces(
        {"message": first["message"], "finish_reason": first["finish_reason"]}
    )
    cell = f"{first['completion_ids'][0]} {orjson.dumps(pieces[0]).decode()} "
    cell += f"p={math.exp(first['logprobs'][0]):.2f}"
    assert cell in out
    assert f"tokens: {len(first['completion_ids'])} generated, 0 with p < 0.1" in out

    # a higher threshold marks exactly the tokens under it, in the JSON and on screen
    as_json = job.cli("traces", "show", str(job.out), "1-0", "--tokens", "--low-p", "0.7", "--json")
    view = orjson.loads(as_json.stdout)
    answers = [e for e in view["conversation"] if e["kind"] == "answer"]
    assert len(answers) == len(turns)
    for answer, turn in zip(answers, turns, strict=True):
        tokens = answer["tokens"]["tokens"]
        assert [t["id"] for t in tokens] == turn["completion_ids"]
        assert [t["logprob"] for t in tokens] == turn["logprobs"]
        assert [t["low"] for t in tokens] == [math.exp(lp) < 0.7 for lp in turn["logprobs"]]
    low = sum(t["low"] for a in answers for t in a["tokens"]["tokens"])
    assert low > 0
    marked = job.cli("traces", "show", str(job.out), "1-0", "--tokens", "--low-p", "0.7")
    assert marked.stdout.count("!") >= low

    refused = job.cli("traces", "show", str(job.out), "1-0", "--tokens", "--low-p", "2")
    assert refused.returncode == 2 and "not a probability" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_tokens_asked_of_a_run_without_them_says_how_to_get_them(job: Job) -> None:
    job.write(walker_servers(), [{"seed": 1, "hops": 1}], agent="walker", trajectories=True)
    done = job.run(timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = job.cli("traces", "show", str(job.out), "0-0", "--conversation", "--tokens")
    assert shown.returncode == 0 and "run.capture_tokens=true" in shown.stdout
