"""A model turn's tokens as shown: text only where it aligns with what the engine answered."""

from __future__ import annotations

import math

from rollgym.builtins.models import toy_tokenizer
from rollgym.reading.token_view import turn_tokens


def test_engine_token_strings_are_the_text_where_the_turn_kept_them() -> None:
    turn = {
        "completion_ids": [101, 102],
        "logprobs": [-0.05, -3.0],
        "top_tokens": [["Hi", "Hello"], ["!", "?"]],
        "top_logprobs": [[-0.05, -3.2], [-1.0, -3.0]],  # the 2nd token was the unlikely "?"
        "message": {"role": "assistant", "content": "Hi?"},
    }
    found = turn_tokens(turn)
    assert found is not None and found["text_source"] == "engine"
    assert [t["text"] for t in found["tokens"]] == ["Hi", "?"]
    assert [t["low"] for t in found["tokens"]] == [False, True]  # p = e^-3 < 0.1
    assert found["low"] == 1 and math.isclose(found["tokens"][1]["p"] or 0, math.exp(-3.0))


def test_toy_tokenizer_text_only_when_its_ids_are_the_recorded_ones() -> None:
    message = {"role": "assistant", "content": "Answer: 44"}
    pieces = toy_tokenizer.generated_pieces({"message": message, "finish_reason": "stop"})
    ids = [toy_tokenizer.token_id(p) for p in pieces]
    turn = {
        "completion_ids": ids,
        "logprobs": [-0.1] * len(ids),
        "message": message,
        "finish_reason": "stop",
    }
    found = turn_tokens(turn)
    assert found is not None and found["text_source"] == "toy tokenizer"
    assert [t["text"] for t in found["tokens"]] == pieces
    # a real engine's ids (another tokenizer): no text is guessed, the ids are shown
    other = turn_tokens({**turn, "completion_ids": [7] * len(ids)})
    assert other is not None and other["text_source"] is None
    assert all(t["text"] is None for t in other["tokens"])


def test_no_token_fields_means_nothing_to_show_and_missing_is_said() -> None:
    assert turn_tokens({"message": {"role": "assistant", "content": "x"}}) is None
    found = turn_tokens({"logprobs": [-0.2], "missing": ["completion_ids"]}, threshold=0.9)
    assert found is not None and found["missing"] == ["completion_ids"]
    assert found["tokens"][0]["id"] is None and found["tokens"][0]["low"] is True
