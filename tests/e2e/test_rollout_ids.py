"""Rollout ids end to end: non-ASCII ids through the built-in agents with a clean trace check,
ids a terminal or a header cannot carry refused at their row, and nothing from input or a
server's answer acting on the terminal."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from e2e_support import Job, agent
from telemetry_helpers import TracedJob, quick_rows, quick_servers

pytestmark = pytest.mark.e2e

NON_ASCII = ["tâche-1", "задача", "walk-🚀", "50%-done", "a b", "数学"]
#: A newline that would forge rollgym's own line, and ESC sequences: clear screen, window title.
FORGED = "rollgym: all good, 0 failed"
HOSTILE = [
    f"x\n{FORGED}",
    "evil\x1b[2J\x1b[H",
    "title\x1b]0;pwned\x07",
    "nul\x00",
    "del\x7f",
    "c1\x9b31m",
    "\u202eexe.txt",
]


def _assert_inert(text: str) -> None:
    """No raw ESC (or other control character but newline) and no forged line."""
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    assert not any(line.startswith(FORGED) for line in text.splitlines())


def test_non_ascii_ids_through_the_builtins_keep_the_trace_contract(tmp_path: Path) -> None:
    job = TracedJob(tmp_path)
    solver = [
        {"agent": "solver", "question": f"{i} + 2", "rollout_id": f"{rid}-s"}
        for i, rid in enumerate(NON_ASCII)
    ]
    walker = [
        {"agent": "walker", "seed": 1000 + i, "hops": 2, "rollout_id": f"{rid}-w"}
        for i, rid in enumerate(NON_ASCII)
    ]
    episodes = [  # the keychain environment plays these itself, against the model server
        {**row, "rollout_id": f"{rid}-e"}
        for row, rid in zip(quick_rows(0, 0, 2), NON_ASCII, strict=False)
    ]
    job.write(
        quick_servers(),
        solver + walker + episodes,
        repeats=2,
        max_attempts=2,
        environment_routes={"keychain_episodes": "keys"},
    )
    done = job.run()
    assert done.returncode == 0, done.stderr
    ids = {record["rollout_id"] for record in job.rollouts}
    rows = solver + walker + episodes
    assert ids == {f"{r['rollout_id']}{s}" for r in rows for s in ("", "-r1")}
    assert job.failures == []
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr
    assert "OK" in check.stdout


def test_hostile_ids_are_refused_at_their_row_and_print_inert(tmp_path: Path) -> None:
    job = Job(tmp_path)
    rows = [{"q": 0, "rollout_id": "fine"}] + [{"q": 1, "rollout_id": rid} for rid in HOSTILE]
    job.write({"echo": agent()}, rows, agent="echo")
    done = job.run()
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout + done.stderr)
    assert [r["rollout_id"] for r in job.rollouts] == ["fine"]
    failures = sorted(job.failures, key=lambda f: f["line"])
    assert [f["line"] for f in failures] == list(range(2, 2 + len(HOSTILE)))
    for failure in failures:
        assert failure["error_kind"] == "invalid_row" and failure["rollout_id"] is None
        assert failure["message"].startswith(f"{job.input}:{failure['line']}: field 'rollout_id': ")
    # the first failure's line names the row and the character, escaped
    assert f"{job.input.name}:2: field 'rollout_id': character U+000A at position 1" in done.stderr


def test_a_servers_message_is_printed_escaped(tmp_path: Path) -> None:
    job = Job(tmp_path)
    text = f"model said \x1b[2J\x1b]0;pwned\x07\n{FORGED}"
    job.write({"say": agent("agents:SayRowTextAgent")}, [{"text": text}], agent="say")
    job.write_rows([orjson.dumps({"text": text}).decode()])
    done = job.run("run.max_attempts=1")
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout + done.stderr)
    assert "model said \\x1b[2J\\x1b]0;pwned\\x07" in done.stderr
    (failure,) = job.failures
    assert text.split("\n")[0] in failure["message"]  # the record keeps the text as it was
