"""The environment of docs/writing-an-environment.md, taken from the page and played over HTTP.

The page's Python blocks together are ``my_envs.py``: the test writes them to a file, checks
that they import from ``rollgym.servers`` only, resolves the classes as a config would
(``impl: my_envs:Echo``) and plays one episode by hand (seed, tool, verify).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from rollgym.config import validate_config
from rollgym.errors import ConfigError

DOC = Path(__file__).parents[3] / "docs" / "writing-an-environment.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


@pytest.fixture
def my_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    source = "\n\n".join(_python_blocks(DOC.read_text(encoding="utf-8")))
    (tmp_path / "my_envs.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_envs

    yield my_envs
    sys.modules.pop("my_envs", None)


def test_the_page_imports_from_the_servers_door_only() -> None:
    blocks = _python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    modules = {
        node.module
        for block in blocks
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for block in blocks
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert {m for m in modules if m and m.startswith("rollgym")} == {"rollgym.servers"}


def _config(tmp_path: Path, impl: str, **options: object) -> dict[str, object]:
    return {
        "run": {"input": str(tmp_path / "rows.jsonl")},
        "servers": {"echo": {"kind": "environment", "impl": impl, **options}},
    }


def test_the_config_of_the_page_resolves_and_checks_the_options(my_envs, tmp_path) -> None:
    config = validate_config(_config(tmp_path, "my_envs:Echo", session_ttl_s=300))
    assert config.servers["echo"].implementation() is my_envs.Echo
    loud = validate_config(_config(tmp_path, "my_envs:LoudEcho", loudness=2))
    assert loud.servers["echo"].validated_options().loudness == 2
    with pytest.raises(ConfigError, match=r"servers\.echo\.loudnes"):
        validate_config(_config(tmp_path, "my_envs:LoudEcho", loudnes=2))


async def _episode(client, url: str, times: int | None, answer: str) -> tuple[str, dict]:
    seeded = (await client.post_json("echo", url + "/seed_session", {"task": {"word": "hey"}})).data
    assert seeded["tools"][0]["function"]["name"] == "shout"
    arguments = {"text": "hey"} if times is None else {"text": "hey", "times": times}
    output = await client.post_json(
        "echo",
        url + "/tools/shout",
        {"session_id": seeded["session_id"], "arguments": arguments},
    )
    verdict = await client.post_json(
        "echo", url + "/verify", {"session_id": seeded["session_id"], "answer": answer}
    )
    return output.data["output"], verdict.data


async def test_the_page_environment_plays_an_episode(my_envs, serving, client) -> None:
    async with serving(my_envs.Echo.build("echo", {})) as url:
        output, verdict = await _episode(client, url, 2, "Answer: HEY")
        assert output == "HEYHEY"
        assert verdict == {"reward": 1.0, "details": {"shouted": True}}
        _, wrong = await _episode(client, url, None, "Answer: hey")
        assert wrong["reward"] == 0.0
    async with serving(my_envs.LoudEcho.build("echo", {"loudness": 3})) as url:
        output, verdict = await _episode(client, url, None, "Answer: HEY")
        assert output == "HEYHEYHEY" and verdict["reward"] == 1.0
