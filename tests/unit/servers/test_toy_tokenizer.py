"""The simulated model's toy tokenizer: lossless pieces, stable ids, consistent engine fields."""

from __future__ import annotations

import math
import random

from rollgym.builtins.models import toy_tokenizer as tt


def test_pieces_cover_the_text_and_ids_are_stable() -> None:
    for text in ("", "Answer: 42", "  a\n\tb  ", 'k-00ab {"key": 1}', "héllo wörld 12345 "):
        assert "".join(tt.pieces(text)) == text
    assert tt.token_id(" key") == tt.token_id(" key") != tt.token_id("key")
    assert tt.token_id(tt.IM_END) == 2
    assert all(16 <= tt.token_id(p) < tt.VOCAB_SIZE for p in tt.pieces("some words 123"))


def test_a_prompt_extends_the_previous_prompt_and_completion() -> None:
    tools = [{"type": "function", "function": {"name": "read_key"}}]
    first = [{"role": "user", "content": "Start key: k-1"}]
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "read_key", "arguments": '{"key":"k-1"}'}}],
    }
    second = [*first, answer, {"role": "tool", "content": "next key: k-2"}]
    before = tt.prompt_pieces(first, tools) + tt.body_pieces(answer)
    after = tt.prompt_pieces(second, tools)
    assert after[: len(before)] == before and len(after) > len(before)


def test_annotate_answers_vllm_fields_that_agree_with_usage() -> None:
    messages = [{"role": "user", "content": "Compute: 1 + 2"}]
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Answer: 3"}}]}
    tt.annotate(
        answer, messages, None, random.Random(0), token_ids=True, logprobs=True, top_logprobs=3
    )
    choice = answer["choices"][0]
    usage = answer["usage"]
    assert usage["prompt_tokens"] == len(answer["prompt_token_ids"])
    assert usage["completion_tokens"] == len(choice["token_ids"]) == 4  # Answer : " 3" end
    content = choice["logprobs"]["content"]
    assert [tt.token_id(entry["token"]) for entry in content] == choice["token_ids"]
    for entry in content:
        assert entry["bytes"] == list(entry["token"].encode())
        top = entry["top_logprobs"]
        assert len(top) == 3 and top[0]["token"] == entry["token"]
        assert top[0]["logprob"] == entry["logprob"] == max(t["logprob"] for t in top)
        assert sum(math.exp(t["logprob"]) for t in top) <= 1.0 + 1e-9
    plain = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}
    tt.annotate(plain, messages, None, random.Random(0))
    assert "prompt_token_ids" not in plain and "logprobs" not in plain["choices"][0]


def test_a_choice_cut_by_max_tokens_generated_only_its_text() -> None:
    cut = {"message": {"role": "assistant", "content": "Answer"}, "finish_reason": "length"}
    whole = {"message": {"role": "assistant", "content": "Answer: 3"}, "finish_reason": "stop"}
    answer = {"choices": [cut, whole]}
    tt.annotate(answer, [{"role": "user", "content": "x"}], None, random.Random(0), token_ids=True)
    assert cut["token_ids"] == [tt.token_id("Answer")]  # no end token: it was cut
    assert whole["token_ids"][-1] == tt.token_id(tt.IM_END)
    assert answer["usage"]["completion_tokens"] == 1 + 4
