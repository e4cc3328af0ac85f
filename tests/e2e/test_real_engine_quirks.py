"""llama.cpp's quirks handled by rollgym, not by the user: tool turns and log-probabilities.

llama-cpp-python's server, function calling on (``chatml-function-calling``) and
log-probabilities available (``logits_all``), on the tiny local model of ``tiny_gguf.py``:

- it refuses (500) an assistant message that carries tool calls with ``"content": null``, the
  form models answer with; rollgym's model client and its ``openai`` proxy send ``""``, so a
  tool loop's second turn is answered (through the proxy, with the official SDK sending null);
- it answers ``logprobs: null`` to ``logprobs: true`` alone and returns no token ids;
  trajectories ask with ``top_logprobs`` too, keep the log-probabilities it gives, and say
  exactly what is missing (``prompt_ids``, ``completion_ids``).

llama-cpp-python builds from source (scripts/test.sh); without it these tests are skipped.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import orjson
import pytest
from e2e_support import Job
from engine_support import llama_server
from tiny_gguf import write_tiny_llama

from chat_shapes import READ_KEY, read_key_answered

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e

TOOL = READ_KEY
#: A tool loop's second turn: the model's tool call echoed as it answered it (content null).
SECOND_TURN = [
    {"role": "user", "content": "Start key: k-00ab\nFind the secret."},
    *read_key_answered("k-00ab", "secret: S-1234", "call-1"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("engine_quirks")
    model = write_tiny_llama(folder / "tiny.gguf")
    quirks = ("--chat_format", "chatml-function-calling", "--logits_all", "true")
    with llama_server(folder, model, *quirks) as url:
        yield url


def _post(url: str, body: dict[str, object]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_the_engine_refuses_null_content_and_accepts_the_empty_string(engine: str) -> None:
    """Why rollgym sends "": this is the engine's own behaviour."""
    body = {"messages": SECOND_TURN, "tools": [TOOL], "max_tokens": 4}
    status, _ = _post(engine + "/v1/chat/completions", body)
    assert status == 500
    fixed = [dict(m) for m in SECOND_TURN]
    fixed[1]["content"] = ""
    status, _ = _post(engine + "/v1/chat/completions", {**body, "messages": fixed})
    assert status == 200


def _job(root: Path, engine: str, servers: dict[str, object], rows: list[dict[str, object]]) -> Job:
    job = Job(root)
    job.write(
        {
            "engine": {"kind": "model", "url": engine},
            "policy": {
                "kind": "model",
                "impl": "openai",
                "upstream": "engine",
                "model_name": "tiny",
            },
            **servers,
        },
        rows,
        concurrency=2,
        timeout_s=300,
        max_attempts=1,
    )
    return job


def test_the_sdk_sending_null_content_through_the_proxy_is_answered(
    engine: str, tmp_path: Path
) -> None:
    job = _job(tmp_path, engine, {}, [])
    proc = job.serve("policy")
    try:
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().split() for _ in range(2))
        sdk = openai.OpenAI(base_url=urls["policy"] + "/v1", api_key="unused", max_retries=0)
        answer = sdk.chat.completions.create(
            model="tiny",
            messages=SECOND_TURN,
            tools=[TOOL],
            max_tokens=4,  # type: ignore[arg-type]
        )
        assert answer.choices
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_token_capture_keeps_the_engines_logprobs_and_says_what_is_missing(
    engine: str, tmp_path: Path
) -> None:
    solver = {
        "kind": "agent",
        "impl": "single_turn",
        "model": "policy",
        "environment": "arith",
        "capture_tokens": True,
        "sampling": {"max_tokens": 4},
    }
    job = _job(
        tmp_path,
        engine,
        {"arith": {"kind": "environment", "impl": "arithmetic"}, "solver": solver},
        [{"question": f"{i} + 1"} for i in range(2)],
    )
    job.write_rows([{"question": f"{i} + 1"} for i in range(2)])
    result = job.run("run.agent=solver", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    trajectories = job.records("trajectories.jsonl")
    assert len(trajectories) == 2
    for line in trajectories:
        (turn,) = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        assert turn["params"]["top_logprobs"] == 0 and turn["params"]["logprobs"] is True
        assert turn["missing"] == ["prompt_ids", "completion_ids"]
        assert turn["tokens_missing"] is True
        assert len(turn["logprobs"]) >= 1
        assert all(isinstance(v, float) and v <= 0.0 for v in turn["logprobs"])
