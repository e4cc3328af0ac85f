"""Assistant tool-call messages with no content go to engines as ``"content": ""``."""

from __future__ import annotations

from rollgym.servers import wire_messages

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_null_content_of_a_tool_call_message_becomes_the_empty_string() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]
    sent = wire_messages(messages)
    assert sent[1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert messages[1]["content"] is None  # the caller's conversation is left as it was
    assert sent[0] is messages[0] and sent[2] is messages[2]


def test_other_messages_are_passed_through_unchanged() -> None:
    messages = [
        {"role": "assistant", "content": None},  # no tool calls: not this quirk
        {"role": "assistant", "content": "thinking", "tool_calls": [CALL]},
        {"role": "user", "content": None, "tool_calls": [CALL]},
    ]
    assert wire_messages(messages) is messages
