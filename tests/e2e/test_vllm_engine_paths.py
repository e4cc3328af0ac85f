"""Against vLLM's CPU build: an abandoned rollout stops at the engine, and the ``openai``
proxy serves what RL users call on vLLM.

vLLM aborts a request whose client closed its connection; these tests hold rollgym to closing
it. vLLM's own ``/metrics`` gauge ``vllm:num_requests_running`` is the judge:

- rollouts given up by their caller (``rollgym serve``; the caller's time limit passes while
  the generations, ``ignore_eos`` and 8,000 tokens, run on) are aborted at vLLM, not run to
  their length (its ``vllm:request_success_total`` counts no finished request for them),
  while every server is still up (plain and streamed model calls);
- a run with ``run.timeout_s`` and ``run.max_attempts=2`` never has vLLM run more requests
  than the run's concurrency: a retry never runs beside its own orphan.

Then the proxy's routes on the same engine: ``/v1/completions`` (text and token-id prompts,
streamed), ``/tokenize`` / ``/detokenize``, vLLM's ``x-request-id`` answer header, and a
Responses call whose id reaches vLLM in the body (vLLM answers it as the response's id); the
simulated model's completions have the keys vLLM's have.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import Job, agent, stop_process, wait_for
from engine_support import (
    VLLM_MARKS,
    RunningWatch,
    finished,
    running,
    skip_without_vllm,
    tiny_hf_model,
    vllm_env,
    vllm_server,
    vllm_servers,
)

from rollgym.errors import RequestTimeout
from rollgym.http.client import HttpClient

MODEL = "tiny"
#: Tokens each given-up generation asks for (``ignore_eos``: it never stops early): the
#: tiny model makes 1,800 in under 2 s on a fast CPU, less than a streamed call's abort may
#: take to reach vLLM there (up to about 2 s measured), so the engine serves a longer context.
GENERATION_TOKENS = 8000
#: The engine's context: the tiny model's 2,048 positions stretched (its weights are random;
#: what is tested is how a generation ends, not what it says).
MAX_MODEL_LEN = 8192
#: The share of one generation's time (measured here, alone) after which the rollouts give
#: up: eight at once take longer each, so they are surely generating then, on a fast CPU
#: (a fixed 3 s outlasted the tiny model's 1,800 tokens on one) and on a loaded one (the
#: engine runs below the tests, and with both cores held by other work a fixed 3 s came
#: before vLLM ran any of them).
GIVE_UP_SHARE = 0.25
#: Rounds a test gives up in, each after 1.5 times as long as the one before, until vLLM ran
#: the generations before the give-up: where other work holds the cores, the agent and the
#: proxy can wait seconds for one, and a give-up before vLLM ran anything tests nothing.
GIVE_UP_ROUNDS = 3
CONCURRENCY = 8
#: How long the given-up generations may take to end. The judge is how they end (aborted, not
#: run to their length), not how soon: measured 0.1-3 s on an idle machine, and without the
#: closes they ran on 9-14 s to their end, so a window between the two is one a loaded
#: machine can miss.
ENDED_WITHIN_S = 60.0
#: How long a test waits for vLLM to be idle before it starts.
IDLE_WITHIN_S = 60.0

skip_without_vllm()

pytestmark = VLLM_MARKS


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server on 127.0.0.1 serving the tiny model (no tracing)."""
    folder = tmp_path_factory.mktemp("vllm")
    model = tiny_hf_model(folder / "model")
    env = vllm_env(VLLM_ALLOW_LONG_MAX_MODEL_LEN="1")
    with vllm_server(
        folder,
        model,
        "--enable-request-id-headers",
        env=env,
        max_model_len=MAX_MODEL_LEN,
        below_tests=True,  # how soon vLLM hears of a give-up is what these tests measure
    ) as url:
        yield url


@pytest.fixture(scope="module")
def give_up_s(engine: str) -> float:
    """How long the rollouts run before they are given up: :data:`GIVE_UP_SHARE` of the time
    one generation of :data:`GENERATION_TOKENS` takes on this machine alone (the quickest of
    two, after a warm-up; eight at once take longer each)."""
    body = orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "count"}],
            "max_tokens": GENERATION_TOKENS,
            "ignore_eos": True,
        }
    )
    took = []
    for _ in range(2):
        request = urllib.request.Request(
            engine + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=600) as answer:
            assert answer.status == 200
        took.append(time.monotonic() - started)
    print(f"one generation of {GENERATION_TOKENS} tokens alone: {min(took):.2f} s")
    return GIVE_UP_SHARE * min(took)


def _servers(engine_url: str) -> dict[str, Any]:
    return vllm_servers(
        engine_url,
        arith=None,
        solver=None,
        sim={"kind": "model", "impl": "simulated", "latency": {"kind": "fixed", "seconds": 0}},
        long=agent(
            "long_generation_agents:LongGenerationAgent",
            model="policy",
            max_tokens=GENERATION_TOKENS,
        ),
        long_stream=agent(
            "long_generation_agents:LongGenerationAgent",
            model="policy",
            max_tokens=GENERATION_TOKENS,
            stream=True,
        ),
    )


@pytest.fixture(scope="module")
def served(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``rollgym serve`` of the proxy and the long-generation agents: name -> URL."""
    job = Job(tmp_path_factory.mktemp("serve")).write(_servers(engine), [])
    proc = job.serve("long", "long_stream", "sim")
    try:
        assert proc.stdout is not None
        urls: dict[str, str] = {}
        while not {"long", "long_stream", "policy", "sim"} <= set(urls):
            line = proc.stdout.readline()
            assert line, f"rollgym serve ended: {proc.stderr.read() if proc.stderr else ''}"
            name, url = line.split()
            urls[name] = url
        yield urls
    finally:
        stop_process(proc, timeout=60)


async def _give_up_on(url: str, give_up_s: float) -> list[BaseException | object]:
    """:data:`CONCURRENCY` rollouts posted to ``url`` and given up after ``give_up_s``."""
    async with HttpClient() as client:
        return await asyncio.gather(
            *(
                client.post_json(
                    "agent",
                    url + "/run",
                    {"question": f"count {i}", "task_index": i, "rollout_index": 0, "attempt": 0},
                    timeout=give_up_s,
                )
                for i in range(CONCURRENCY)
            ),
            return_exceptions=True,
        )


def _idle(engine: str) -> bool:
    """Whether vLLM runs no request now; a ``/metrics`` that does not answer in time (vLLM
    busy on a loaded machine) is asked again, not a failure."""
    try:
        return running(engine) == 0
    except OSError:  # TimeoutError included
        return False


@pytest.mark.parametrize("name", ["long", "long_stream"])
def test_given_up_rollouts_leave_the_engine_running_nothing(
    engine: str, served: dict[str, str], name: str, give_up_s: float
) -> None:
    give_up = give_up_s
    for _ in range(GIVE_UP_ROUNDS):
        assert wait_for(lambda: _idle(engine), timeout=IDLE_WITHIN_S)
        before = finished(engine)
        with RunningWatch(engine) as watch:
            answers = asyncio.run(_give_up_on(served[name], give_up))
            gave_up_at = time.monotonic()
            assert all(isinstance(a, RequestTimeout) for a in answers), answers
            assert wait_for(lambda: _idle(engine), timeout=ENDED_WITHIN_S, interval=0.1), (
                f"vLLM still runs {running(engine)} requests {ENDED_WITHIN_S}s after their "
                "rollouts ended"
            )
            idle_after = time.monotonic() - gave_up_at
        after = finished(engine)
        ended = {why: after.get(why, 0) - before.get(why, 0) for why in after}
        # vLLM counts a generation that ran to its end by why it ended; an aborted one not at all
        assert not any(ended.values()), f"given-up generations ran to their end: {ended}"
        if watch.most >= 1:
            print(f"{name}: vLLM ran nothing {idle_after:.2f}s after the give-up at {give_up:.1f}s")
            return
        give_up *= 1.5
    pytest.fail(f"vLLM never ran the generations before the give-up in {GIVE_UP_ROUNDS} rounds")


def test_a_retry_never_runs_beside_its_orphan(
    engine: str, tmp_path: Path, give_up_s: float
) -> None:
    servers = _servers(engine)
    del servers["long_stream"], servers["sim"]
    rows = [{"question": f"count {i}", "agent": "long"} for i in range(CONCURRENCY)]
    give_up = give_up_s
    for round_ in range(GIVE_UP_ROUNDS):
        assert wait_for(lambda: _idle(engine), timeout=IDLE_WITHIN_S)
        job = Job(tmp_path / f"round{round_}").write(
            servers,
            rows,
            concurrency=CONCURRENCY,
            timeout_s=give_up,
            max_attempts=2,
            agent="long",
        )
        with RunningWatch(engine) as watch:
            done = job.run(timeout=600)
        assert "all 8 failed (timeout: 8)" in done.stderr, done.stderr[-2000:]
        failures = job.failures
        assert len(failures) == CONCURRENCY and all(f["error_kind"] == "timeout" for f in failures)
        assert all(f["attempt"] == 1 for f in failures), failures[:2]  # the second attempt
        # every round: a retry's generation never ran beside its given-up first attempt's
        assert watch.most <= CONCURRENCY, f"vLLM ran {watch.most} requests at once"
        if watch.most >= 1:
            return
        give_up *= 1.5  # both attempts gave up before vLLM ran anything: a loaded machine
    pytest.fail(f"vLLM never ran the generations before the give-ups in {GIVE_UP_ROUNDS} rounds")


async def _engine_paths(policy: str, sim: str) -> dict[str, object]:
    async with HttpClient() as client:
        simulated = await client.post_json(
            "sim", sim + "/v1/completions", {"prompt": "count", "max_tokens": 4}
        )
        text = await client.post_json(
            "policy",
            policy + "/r/9-0/v1/completions",
            {"prompt": "count", "max_tokens": 4},
            timeout=120,
        )
        ids = await client.post_json(
            "policy",
            policy + "/v1/completions",
            {"prompt": [5, 6, 7], "max_tokens": 4, "return_token_ids": True},
            headers={"X-Request-Id": "9-1.3"},
            timeout=120,
        )
        async with client.stream(
            "policy",
            policy + "/r/9-2/v1/completions",
            {"prompt": [5, 6], "max_tokens": 4, "stream": True},
        ) as streamed:
            lines = [line async for line in streamed.content if line.strip()]
        tokens = await client.post_json(
            "policy", policy + "/tokenize", {"prompt": "count"}, timeout=120
        )
        assert tokens.status == 200, (tokens.status, tokens.data, tokens.text)
        back = await client.post_json(
            "policy", policy + "/detokenize", {"tokens": tokens.data["tokens"]}, timeout=120
        )
        responses = await client.post_json(
            "policy",
            policy + "/r/9-3/v1/responses",
            {"input": "count", "max_output_tokens": 4},
            timeout=120,
        )
    return {
        "text": text,
        "ids": ids,
        "lines": lines,
        "tokens": tokens,
        "back": back,
        "responses": responses,
        "simulated": simulated,
    }


def test_the_proxy_serves_completions_tokenize_and_responses_on_vllm(
    served: dict[str, str],
) -> None:
    got = asyncio.run(_engine_paths(served["policy"], served["sim"]))
    text, ids, tokens, back, responses = (
        got["text"], got["ids"], got["tokens"], got["back"], got["responses"]
    )  # fmt: skip
    assert text.status == 200, text.data
    assert text.data["object"] == "text_completion"
    assert text.data["id"].startswith("cmpl-9-0.0")  # vLLM took the rollout's request id
    assert text.headers["x-request-id"] == "9-0.0"  # vLLM's answer header, passed on
    assert ids.status == 200, ids.data
    assert ids.data["id"].startswith("cmpl-9-1.3")
    lines = got["lines"]
    assert lines[-1] == b"data: [DONE]\n" and len(lines) >= 2
    assert tokens.status == 200 and tokens.data["count"] == len(tokens.data["tokens"]) > 0
    assert back.status == 200 and "count" in back.data["prompt"]
    assert responses.status == 200, responses.data
    # vLLM answers the body's request_id as the response id: its engine ran it under that
    # id (resp_9-3.0_0), which names the rollout
    assert responses.data["id"] == "resp_9-3.0"
    # the simulated model answers completions in vLLM's shape: the same keys at every level
    simulated = got["simulated"].data
    assert set(simulated) == set(text.data)
    assert set(simulated["choices"][0]) == set(text.data["choices"][0])
    assert set(simulated["usage"]) == set(text.data["usage"])
