"""How the simulated policy plays the sandboxed environments (``code`` and ``terminal``).

It recognises the shipped task from the prompt ("Problem <id>:" / "Task <id>:") and, when the
rollout is to be correct, plays the task's reference: the reference solution (tested once
with ``run_public_tests``, then submitted) or the reference command sequence (one
``run_shell`` per turn). Otherwise it plays a plausible wrong attempt: half of the time the
task's own ``wrong`` answer, else an attempt that abuses the sandbox (loops forever,
allocates without bound, forks without end, floods its output, reads secrets outside the
sandbox, writes outside its work directory, opens a socket to a loopback server, leaves a
process behind), so a run of the example exercises every limit.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from rollgym.builtins.envs.tasksets import load_taskset
from rollgym.builtins.models.reply import Reply

_TASK_ID = re.compile(r"^(?:Problem|Task) ([\w.-]+):", re.MULTILINE)
_DEF = re.compile(r"^def (\w+)\(", re.MULTILINE)

#: Function bodies of abusive code attempts (the body of the problem's function).
CODE_ABUSES: dict[str, str] = {
    "infinite_loop": "    while True:\n        pass",
    "unbounded_allocation": "    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 28))",
    "fork_bomb": "    import os\n    while True:\n        os.fork()",
    "output_flood": "    import sys\n    while True:\n        sys.stdout.write('x' * 65536)",
    "read_secrets": "    return open('/etc/shadow').read() + open('/root/.bashrc').read()",
    "network": (
        "    import socket\n"
        "    socket.create_connection(('127.0.0.1', 8000), timeout=2).sendall(b'leak')"
    ),
    "crash": "    raise RuntimeError('not implemented yet')",
}

#: Abusive shell commands for terminal tasks.
SHELL_ABUSES: dict[str, str] = {
    "infinite_loop": "while true; do :; done",
    "unbounded_allocation": "python3 -c 'x = bytearray(10 * 1024 ** 3)'",
    "fork_bomb": "bomb() { bomb | bomb & }; bomb",
    "output_flood": "yes rollgym",
    "read_secrets": "cat /etc/shadow /root/.bashrc",
    "write_outside": "echo pwned > /etc/motd; touch /usr/bin/evil",
    "network": "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000), 2)\"",
    "leave_process": "sleep 600 & echo started",
}


def _text(message: Mapping[str, object]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _task(messages: Sequence[Mapping[str, object]], taskset: str) -> dict[str, Any] | None:
    for message in messages:
        if message.get("role") == "user":
            found = _TASK_ID.search(_text(message))
            if found is not None:
                return load_taskset(taskset).get(found.group(1))
    return None


def _tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The arguments of every tool call the assistant made so far, in order."""
    calls = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            try:
                calls.append(orjson.loads((call.get("function") or {}).get("arguments") or "{}"))
            except orjson.JSONDecodeError:
                calls.append({})
    return calls


def code_turn(messages: list[dict[str, Any]], correct: bool, rng: random.Random) -> Reply:
    """Test one attempt with ``run_public_tests``, then submit that same attempt."""
    calls = _tool_calls(messages)
    if calls:
        code = calls[-1].get("code", "")
        return Reply(content=f"Here is my solution:\n```python\n{code}```")
    problem = _task(messages, "code")
    if problem is None:
        return Reply(content="```python\ndef solve(*args):\n    return None\n```")
    if correct:
        attempt = problem["solution"]
    elif rng.random() < 0.5:
        attempt = problem["wrong"]
    else:
        found = _DEF.search(problem["solution"])
        name = found.group(1) if found else "solve"
        body = CODE_ABUSES[rng.choice(sorted(CODE_ABUSES))]
        attempt = f"def {name}(*args, **kwargs):\n{body}\n"
    return Reply(tool_call=("run_public_tests", {"code": attempt}))


def terminal_turn(messages: list[dict[str, Any]], correct: bool, rng: random.Random) -> Reply:
    """Run the reference commands one per turn (or one wrong command), then say done."""
    done = len(_tool_calls(messages))
    task = _task(messages, "terminal")
    if task is None:
        return Reply(content="Done.")
    if correct:
        commands: list[str] = task["commands"]
        if done < len(commands):
            return Reply(tool_call=("run_shell", {"command": commands[done]}))
        return Reply(content="Done.")
    if done == 0:
        bad = (
            task["wrong"] if rng.random() < 0.5 else SHELL_ABUSES[rng.choice(sorted(SHELL_ABUSES))]
        )
        return Reply(tool_call=("run_shell", {"command": bad}))
    return Reply(content="Done.")


def turn(
    messages: list[dict[str, Any]], tool_names: set[str], correct: bool, rng: random.Random
) -> Reply:
    """The next message in a sandboxed environment (chosen by the tools it offers)."""
    if "run_public_tests" in tool_names:
        return code_turn(messages, correct, rng)
    return terminal_turn(messages, correct, rng)
