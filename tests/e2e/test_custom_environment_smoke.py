"""A new environment smoke-tested end to end with ``rollgym run`` and no real model.

The environment of docs/writing-an-environment.md (``my_envs:Echo``), written to a temporary
working directory, played by the built-in ``tool_loop`` agent and by the environment's own
episode ``/run``, both against the simulated model, which knows nothing of it: it calls the
``shout`` tool with schema-valid arguments and then answers. Run with the ``rollgym`` console
script, as a user would.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import orjson
import pytest
import yaml
from console_script import require_script, rollouts, run_script, script_env

pytestmark = pytest.mark.e2e

ECHO = textwrap.dedent(
    """
    from rollgym.servers import Environment, SessionState, Verdict, tool


    class Echo(Environment):
        async def seed(self, task: dict) -> SessionState:
            word = task["word"]
            prompt = f"Shout the word {word!r} with the shout tool, then reply 'Answer: <it>'."
            return SessionState(messages=[{"role": "user", "content": prompt}], data={"word": word})

        @tool
        async def shout(self, state: SessionState, text: str, times: int = 1) -> str:
            \"\"\"Upper-case a text.\"\"\"
            state.data["shouted"] = text
            return text.upper() * times

        async def verify(self, state: SessionState, answer: str | None) -> Verdict:
            shouted = state.data.get("shouted")
            ok = shouted and (answer or "").endswith(state.data["word"].upper())
            return Verdict(reward=1.0 if ok else 0.0, details={"shouted": shouted})
    """
)
WORDS = ["hello", "rollgym", "tools", "zebra"]


def test_a_custom_environment_plays_end_to_end_on_the_simulated_model(tmp_path: Path) -> None:
    require_script()
    (tmp_path / "my_envs.py").write_text(ECHO)
    rows = [{"word": w} for w in WORDS] + [
        {"task_id": {"taskset": "echo_tasks", "task_id": w}, "word": w} for w in WORDS
    ]
    (tmp_path / "rows.jsonl").write_text("".join(orjson.dumps(r).decode() + "\n" for r in rows))
    config = {
        "run": {
            "input": "rows.jsonl",
            "output_dir": "out",
            "agent": "walker",
            "environment_routes": {"echo_tasks": "echo"},
        },
        "servers": {
            "policy": {"kind": "model", "impl": "simulated", "accuracy": 1.0},
            "echo": {"kind": "environment", "impl": "my_envs:Echo", "model": "policy"},
            "walker": {
                "kind": "agent",
                "impl": "tool_loop",
                "model": "policy",
                "environment": "echo",
            },
        },
        "telemetry": {"preset": "off", "exporter": "none"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    run_script(tmp_path, "run", "job.yaml", "--no-table", env=script_env(telemetry=False))
    records = rollouts(tmp_path / "out")
    assert len(records) == 2 * len(WORDS)
    assert {r["dispatch_name"] for r in records} == {"walker", "echo"}
    assert all(r["reward"] == 1.0 for r in records), [r["result"] for r in records]
    # the model called the tool with the word the prompt quotes, and answered with its output
    for record in records:
        assert record["result"]["details"]["shouted"] in WORDS
