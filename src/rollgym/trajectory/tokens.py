"""One rollout's tokens as a trainer reads them: the first prompt, then everything after it.

A multi-turn rollout is one token sequence when each turn's prompt extends the previous prompt
+ completion (the recorder checked it and kept only the new prompt tokens). Everything after
the first prompt is the "completion" of the row: the model's generated tokens (loss mask 1,
with their log-probabilities) interleaved with the tool and template tokens the environment
added between turns (loss mask 0, log-probability 0.0). When a turn's prompt does not extend
the previous one, its whole prompt is appended with mask 0 and ``prefix_ok`` is False, so a
trainer can drop or handle such rows; nothing is re-tokenized to hide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollgym.policy_versions import ANSWER_KEY, TOKEN_SPANS_KEY


@dataclass(slots=True)
class TokenSequence:
    """The columns of one export row (``completion_ids``, ``logprobs`` and ``loss_mask`` have
    the same length)."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    #: Per ``completion_ids`` token: the engine's alternatives (token strings, and their
    #: log-probabilities) where generated with ``top_logprobs``; empty lists elsewhere.
    top_tokens: list[list[str]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)
    prefix_ok: bool = True
    #: False when an engine answered token ids without log-probabilities for some turn.
    logprobs_complete: bool = True
    #: Per ``completion_ids`` token: the policy version that generated it (as text), where
    #: the model server stamped one; None for context tokens and unstamped turns. Where the
    #: engine says a version changed inside a generation, its token spans are followed.
    token_versions: list[str | None] = field(default_factory=list)

    def _context(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.loss_mask += [0] * len(ids)
        self.top_tokens += [[] for _ in ids]
        self.top_logprobs += [[] for _ in ids]
        self.token_versions += [None] * len(ids)

    def _generated(
        self, ids: list[int], logprobs: list[float] | None, turn: dict[str, Any]
    ) -> None:
        if logprobs is None or len(logprobs) != len(ids):
            self.logprobs_complete = False
            logprobs = [0.0] * len(ids)
        self.completion_ids += ids
        self.logprobs += logprobs
        self.loss_mask += [1] * len(ids)
        self.token_versions += _versions_per_token(turn, len(ids))
        top_tokens = turn.get("top_tokens") or []
        top_logprobs = turn.get("top_logprobs") or []
        if len(top_tokens) == len(top_logprobs) == len(ids):
            self.top_tokens += top_tokens
            self.top_logprobs += top_logprobs
            return
        self.top_tokens += [[] for _ in ids]
        self.top_logprobs += [[] for _ in ids]


def token_sequence(trajectory: dict[str, Any]) -> TokenSequence | None:
    """The sequence of a trajectory recorded with ``capture: tokens``; None without tokens."""
    model_turns = [t for t in trajectory.get("turns") or [] if t.get("type") == "model"]
    if not model_turns or any("prompt_ids" not in t for t in model_turns):
        return None
    sequence = TokenSequence(prefix_ok=bool(trajectory.get("prefix_ok", True)))
    for index, turn in enumerate(model_turns):
        prompt = list(turn["prompt_ids"])
        if index == 0:
            sequence.prompt_ids = prompt
        else:
            if not turn.get("extends_previous", False):
                sequence.prefix_ok = False
            sequence._context(prompt)
        sequence._generated(list(turn.get("completion_ids") or []), turn.get("logprobs"), turn)
    return sequence


def _versions_per_token(turn: dict[str, Any], count: int) -> list[str | None]:
    """The version of each generated token of one model turn (docs/policy-versions.md)."""
    version = turn.get(ANSWER_KEY)
    versions: list[str | None] = [None if version is None else str(version)] * count
    spans = turn.get(TOKEN_SPANS_KEY)
    if isinstance(spans, list):
        for span in spans:
            if not isinstance(span, dict):
                continue
            start, end = span.get("start"), span.get("end")
            if isinstance(start, int) and isinstance(end, int):
                for index in range(max(0, start), min(end, count)):
                    versions[index] = str(span.get("version"))
    return versions
