"""A trajectory read back as a conversation (the recorder's deltas rebuilt), and printed inert."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from rollgym.reading.conversation_report import conversation_view, print_conversation
from rollgym.reading.run_reader import RolloutFiles, names_rollout
from rollgym.trajectory.conversation import (
    completion_text,
    conversation,
    finish_reason,
    full_messages,
)
from rollgym.trajectory.record import TrajectoryRecorder

SYSTEM = {"role": "system", "content": "walk the keys"}
USER = {"role": "user", "content": "start at k-1"}
CALL = {"id": "c0", "type": "function", "function": {"name": "read_key", "arguments": "{}"}}


def _answer(message: dict, reason: str, tokens: tuple[int, int]) -> dict:
    return {
        "id": f"chatcmpl-{tokens[0]}",
        "model": "engine-model",
        "choices": [{"message": message, "finish_reason": reason}],
        "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]},
    }


def _recorded(output: str = "next key: k-2", cap: int = 64 * 1024) -> dict:
    """A two-call tool rollout recorded by the real recorder."""
    recorder = TrajectoryRecorder("turns", tool_output_max_bytes=cap)
    first = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    recorder.model_call(
        {"messages": [SYSTEM, USER], "model": "policy"}, _answer(first, "tool_calls", (20, 5))
    )
    recorder.tool_call("read_key", {"key": "k-1"}, output)
    tool_message = {"role": "tool", "tool_call_id": "c0", "content": output}
    final = {"role": "assistant", "content": "Answer: S-1"}
    recorder.model_call(
        {"messages": [SYSTEM, USER, first, tool_message], "temperature": 0.5},
        _answer(final, "stop", (31, 4)),
    )
    recorder.verify("Answer: S-1", {"reward": 1.0})
    return recorder.to_json()


def test_full_messages_rebuild_the_deltas() -> None:
    trajectory = _recorded()
    # the second call stored only what was new (the tool message), from index 3 on
    assert trajectory["turns"][2]["messages_start"] == 3
    whole = full_messages(trajectory)
    assert [m["role"] for m in whole] == ["system", "user", "assistant", "tool", "assistant"]
    assert whole[-1]["content"] == completion_text(trajectory) == "Answer: S-1"
    assert finish_reason(trajectory) == "stop"
    assert trajectory["turns"][0]["model"] == "engine-model"


def test_conversation_in_order_with_figures() -> None:
    entries = conversation(_recorded())
    assert [e["kind"] for e in entries] == [
        "message",
        "message",
        "answer",
        "tool",
        "answer",
        "verify",
    ]
    first, second = entries[2], entries[4]
    assert (first["input_tokens"], first["output_tokens"], first["finish_reason"]) == (
        20,
        5,
        "tool_calls",
    )
    assert first["tool_calls"] == [CALL] and first["content"] is None
    assert (second["call"], second["content"]) == (1, "Answer: S-1")
    # the tool message of the second request is the tool turn, shown once, with its arguments
    assert entries[3] == {
        "kind": "tool",
        "name": "read_key",
        "arguments": {"key": "k-1"},
        "output": "next key: k-2",
    }
    assert entries[5] == {"kind": "verify", "answer": "Answer: S-1", "reward": 1.0}


def test_cut_texts_are_marked() -> None:
    entries = conversation(_recorded(output="x" * 5000, cap=1000))
    tool = entries[3]
    assert tool["truncated_bytes"] == 5000 and len(tool["output"]) == 1000


def test_an_empty_or_odd_trajectory_is_no_conversation() -> None:
    assert conversation({}) == [] and full_messages({"turns": "nope"}) == []
    assert completion_text({"turns": [{"type": "tool"}]}) is None


def test_hostile_text_reaches_the_terminal_inert() -> None:
    hostile = "\x1b]8;;http://evil\x07click\x1b]8;;\x07 [bold red]owned[/]\nsecond line"
    files = RolloutFiles(
        rollout={"rollout_id": "3-0", "reward": 1.0, "dispatch_name": "walker"},
        trajectory=_recorded(output=hostile),
    )
    view = conversation_view("3-0", files, {"chatcmpl-20": 12.5})
    assert view["conversation"][2]["latency_ms"] == 12.5
    out = StringIO()
    print_conversation(Console(file=out, width=200, highlight=False, color_system=None), view)
    text = out.getvalue()
    assert "\x1b]8" not in text and "\x07" not in text
    assert "\\x1b]8;;http://evil\\x07click" in text
    assert "[bold red]owned[/]" in text  # shown as typed, not as markup
    assert "\n  second line" in text
    assert "12.5 ms" in text


def test_ids_name_a_rollout_or_one_attempt() -> None:
    assert names_rollout("3-0", "3-0") and names_rollout("3-0", "3-0-a2")
    assert names_rollout("3-0-a2", "3-0-a2") and not names_rollout("3-0-a1", "3-0-a2")
    assert not names_rollout("3-0", "13-0") and not names_rollout("3-0", None)
