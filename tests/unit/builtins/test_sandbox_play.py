"""How the simulated policy plays code and terminal tasks (through ``policy.decide``)."""

from __future__ import annotations

import random
from typing import Any

import orjson

from rollgym.builtins.envs.code import solution_of
from rollgym.builtins.envs.tasksets import load_taskset
from rollgym.builtins.models.policy import Reply, decide
from rollgym.builtins.models.sandbox_play import CODE_ABUSES, SHELL_ABUSES

CODE_TOOLS = {"run_code", "run_public_tests"}


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def _after(messages: list[dict[str, Any]], reply: Reply, output: str) -> list[dict[str, Any]]:
    assert reply.tool_call is not None
    name, arguments = reply.tool_call
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


def test_a_correct_coder_tests_then_submits_the_reference() -> None:
    problem = load_taskset("code")["run_length"]
    messages = _prompt(f"Problem run_length:\n{problem['prompt']}")
    first = decide(messages, CODE_TOOLS, True, random.Random(1))
    assert first.tool_call == ("run_public_tests", {"code": problem["solution"]})
    final = decide(_after(messages, first, "passed 2/2"), CODE_TOOLS, True, random.Random(2))
    assert final.tool_call is None and solution_of(final.content) == problem["solution"]


def test_a_wrong_coder_tries_the_plausible_bug_and_every_abuse() -> None:
    problem = load_taskset("code")["gcd"]
    messages = _prompt(f"Problem gcd:\n{problem['prompt']}")
    attempts = set()
    for seed in range(200):
        reply = decide(messages, CODE_TOOLS, False, random.Random(seed))
        assert reply.tool_call is not None
        attempts.add(reply.tool_call[1]["code"])
    assert problem["wrong"] in attempts and problem["solution"] not in attempts
    for body in CODE_ABUSES.values():
        assert f"def gcd(*args, **kwargs):\n{body}\n" in attempts


def test_a_correct_shell_user_runs_the_reference_commands_then_stops() -> None:
    task = load_taskset("terminal")["git_ignore"]
    messages = _prompt(f"Task git_ignore:\n{task['prompt']}")
    played = []
    for turn in range(len(task["commands"]) + 1):
        reply = decide(messages, {"run_shell"}, True, random.Random(turn))
        if reply.tool_call is None:
            break
        played.append(reply.tool_call[1]["command"])
        messages = _after(messages, reply, "exit code 0")
    assert played == task["commands"] and reply.content == "Done."


def test_a_wrong_shell_user_runs_one_bad_command() -> None:
    task = load_taskset("terminal")["count_errors"]
    messages = _prompt(f"Task count_errors:\n{task['prompt']}")
    commands = {
        reply.tool_call[1]["command"]
        for seed in range(200)
        if (reply := decide(messages, {"run_shell"}, False, random.Random(seed))).tool_call
    }
    assert commands == {task["wrong"], *SHELL_ABUSES.values()}
    done = decide(
        _after(messages, Reply(tool_call=("run_shell", {"command": "x"})), "ok"),
        {"run_shell"},
        False,
        random.Random(0),
    )
    assert done.content == "Done."
