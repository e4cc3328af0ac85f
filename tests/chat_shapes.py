"""Chat shapes the model tests send: the keychain's ``read_key`` tool and a tool call answered,
as the OpenAI chat API spells them. Importable from every test folder (pytest puts ``tests/``
on ``sys.path`` for its conftest).
"""

from __future__ import annotations

from typing import Any

#: The keychain environment's tool, as a chat request's ``tools`` entry.
READ_KEY = {
    "type": "function",
    "function": {
        "name": "read_key",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
    },
}


def read_key_answered(key: str, result: str, call_id: str) -> list[dict[str, Any]]:
    """The assistant's ``read_key`` call on ``key`` (content null, as models send a tool call
    back) and the tool's message answering it with ``result``."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_key", "arguments": f'{{"key": "{key}"}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
