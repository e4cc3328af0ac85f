"""A real engine behind rollgym: llama.cpp's server (llama-cpp-python) on a tiny local model.

The model is written by the test itself (``tiny_gguf.py``: random weights, nothing
downloaded). The engine refuses every request id that is not a UUID with an empty 400, has
no ``/v1/responses``, and counts tokens itself: exactly what rollgym's ``openai`` proxy must
cope with. Checked on real runs: every rollout completes, ``rollgym traces check`` passes, the
token usage in the spans is the engine's, and the official OpenAI SDK (plain, streamed,
Responses) works through the proxy.

llama-cpp-python builds from source (scripts/test.sh builds the wheel once per machine and
caches it); without it these tests are skipped, saying so.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from engine_support import llama_server
from telemetry_helpers import TracedJob
from tiny_gguf import write_tiny_llama

from rollgym.servers.request_ids import is_uuid, upstream_uuid
from rollgym.telemetry import names
from server_specs import Spec, agent_spec, proxied_servers

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e

ROWS = [{"question": f"{i} + 2", "agent": agent} for i in range(3) for agent in ("solver", "sdk")]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server on 127.0.0.1, serving the tiny model."""
    folder = tmp_path_factory.mktemp("engine")
    with llama_server(folder, write_tiny_llama(folder / "tiny.gguf")) as url:
        yield url


def servers(engine_url: str, **changes: dict[str, Any]) -> dict[str, Spec]:
    """The proxy over the engine, its ``solver`` and the SDK agent ``sdk``."""
    sdk = agent_spec("telemetry_agents:SdkAgent", "arith")
    return proxied_servers(engine_url, "tiny", sdk=sdk, **changes)


def test_the_engine_refuses_request_ids_that_are_not_uuids(engine: str) -> None:
    """Why the proxy has a request-id policy: this is the engine's own behaviour."""
    request = urllib.request.Request(
        engine + "/v1/chat/completions",
        data=b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        headers={"Content-Type": "application/json", "X-Request-Id": "3-0.0"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 400 and refused.value.read() == b""


@pytest.fixture(scope="module")
def engine_run(engine: str, tmp_path_factory: pytest.TempPathFactory) -> TracedJob:
    job = TracedJob(tmp_path_factory.mktemp("engine_run"))
    job.write(servers(engine), ROWS, agent="solver", repeats=2, concurrency=4, timeout_s=300)
    started = time.monotonic()
    result = job.run(timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    job.duration = time.monotonic() - started  # type: ignore[attr-defined]
    return job


def test_a_real_job_completes_and_the_trace_check_passes(engine_run: TracedJob) -> None:
    summary = engine_run.summary
    assert summary["requested"] == summary["completed"] == 2 * len(ROWS), engine_run.failures
    check = engine_run.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr


def test_usage_in_spans_is_the_engines(engine_run: TracedJob) -> None:
    spans = engine_run.spans()
    # the agent's gym.model.chat and the proxy's GenAI-named span of its call upstream
    chats = spans.named(names.SPAN_MODEL_CHAT) + spans.named("chat tiny")
    sdk_rollouts = [r for r in engine_run.rollouts if r["dispatch_name"] == "sdk"]
    assert sdk_rollouts
    for rollout in sdk_rollouts:
        usage = rollout["result"]["usage"]  # what the engine answered, as the SDK parsed it
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        mine = [c for c in chats if c.rollout_id == rollout["rollout_id"]]
        assert len(mine) == 2  # the agent's call and the proxy's call upstream
        for chat in mine:
            assert chat.attributes[names.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
            assert chat.attributes[names.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]


def test_the_proxy_switched_to_uuids_and_kept_the_mapping(engine_run: TracedJob) -> None:
    proxied = [
        c
        for c in engine_run.spans().named("chat tiny")
        if names.MODEL_UPSTREAM_REQUEST_ID in c.attributes
    ]
    assert len(proxied) == 2 * len(ROWS)
    for chat in proxied:
        request_id = chat.attributes[names.MODEL_REQUEST_ID]
        assert request_id.startswith(chat.rollout_id + ".")
        sent = chat.attributes[names.MODEL_UPSTREAM_REQUEST_ID]
        assert is_uuid(sent) and sent == upstream_uuid(request_id)


def test_the_openai_sdk_through_the_proxy(engine: str, tmp_path: Path) -> None:
    job = TracedJob(tmp_path)
    job.write(servers(engine), [])
    proc = job.serve("policy")
    try:
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().split() for _ in range(2))
        client = openai.OpenAI(
            base_url=urls["policy"] + "/r/sdk-0/v1", api_key="unused", max_retries=0
        )
        messages = [{"role": "user", "content": "Compute: 1 + 1"}]
        greedy = {"model": "tiny", "messages": messages, "max_tokens": 8, "temperature": 0}
        plain = client.chat.completions.create(**greedy)
        chunks = list(client.chat.completions.create(**greedy, stream=True))
        response = client.responses.create(
            model="tiny", input="Compute: 1 + 1", max_output_tokens=8
        )
        models = client.models.list()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    # the engine's own count (llama-cpp-python may count a few more than max_tokens when a
    # character spans byte tokens): what matters is that it is the engine's, passed through
    assert plain.usage is not None and plain.usage.completion_tokens >= 1
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content  # greedy: the same text, streamed
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    assert response.object == "response" and response.usage is not None
    assert response.usage.output_tokens >= 1  # translated to chat completions
    assert [m.id for m in models.data] == ["tiny"]


def test_a_refusing_engine_fails_rollouts_once_with_its_reason(engine: str, tmp_path: Path) -> None:
    """``request_id: header`` against this engine: the issue's original failure, now a
    permanent failure per rollout (not retried) whose message says what the engine did."""
    job = TracedJob(tmp_path)
    job.write(
        servers(engine, policy={"request_id": "header"}),
        [{"question": "1 + 1"}, {"question": "2 + 2"}],
        agent="solver",
        max_attempts=3,
    )
    result = job.run(timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert job.summary["failed"] == 2 and job.summary["completed"] == 0
    for failure in job.failures:
        assert failure["error_kind"] == "http_4xx"
        assert failure["rollout_id"] in ("0-0", "1-0")  # attempt 0 only: not retried
        assert "upstream answered HTTP 400: (empty body)" in failure["message"]
