"""A model turn's generated tokens as a person reads them: id, log-probability, probability,
the text of the token where it can be known, and a mark on the unlikely ones.

With ``run.capture_tokens`` a trajectory's model turns hold the engine's own
``completion_ids`` and ``logprobs`` (see :mod:`rollgym.trajectory.record`). Nothing here is
recomputed: the text of a token is shown only where it can be *aligned* with what the engine
answered, never guessed:

* the engine's own token strings, where the turn kept its ``top_tokens`` (a run that asked
  for ``top_logprobs``): the alternative whose log-probability is the chosen token's;
* the simulated model's toy tokenizer, when the answer's text, split by it, has exactly the
  recorded ids (so a run on the simulated model shows every token's text);
* otherwise the id alone.

One function for the terminal (``traces show --conversation --tokens``) and the viewer's
rollout page (``/api/conversation``), so both mark the same tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

#: Default probability under which a generated token is marked as unlikely.
LOW_P = 0.1

TextSource = Literal["engine", "toy tokenizer"]


class Token(TypedDict):
    """One generated token."""

    id: int | None
    logprob: float | None
    p: float | None
    #: the token's text, where it could be aligned; None: shown as its id
    text: str | None
    low: bool


class TurnTokens(TypedDict):
    """A model turn's generated tokens, as :func:`turn_tokens` reads them."""

    threshold: float
    #: where each token's text came from; None: the ids could not be aligned with text
    text_source: TextSource | None
    tokens: list[Token]
    low: int
    #: what the engine did not answer for this turn (never recomputed)
    missing: list[str]


def _floats(value: object) -> list[float | None]:
    if not isinstance(value, list):
        return []
    return [float(v) if isinstance(v, int | float) else None for v in value]


def _ints(value: object) -> list[int | None]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, int) and not isinstance(v, bool) else None for v in value]


def _engine_texts(turn: Mapping[str, object], logprobs: Sequence[float | None]) -> list[str] | None:
    """Each chosen token's own string from the engine's alternatives (``top_tokens``), or None
    unless every token's log-probability is found among its alternatives."""
    tokens, values = turn.get("top_tokens"), turn.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or not logprobs:
        return None
    if not (len(tokens) == len(values) == len(logprobs)):
        return None
    texts: list[str] = []
    for chosen, names, numbers in zip(logprobs, tokens, values, strict=True):
        if chosen is None or not isinstance(names, list) or not isinstance(numbers, list):
            return None
        found = [n for n, v in zip(names, numbers, strict=False) if v == chosen]
        if not found or not isinstance(found[0], str):
            return None
        texts.append(found[0])
    return texts


def _toy_texts(turn: Mapping[str, Any], ids: Sequence[int | None]) -> list[str] | None:
    """The answer's text split by the simulated model's tokenizer, when its ids are exactly
    the recorded ones (a real engine's ids never match by chance: they are hashes of text)."""
    message = turn.get("message")
    if not isinstance(message, dict) or not ids:
        return None
    from rollgym.builtins.models import toy_tokenizer  # only read when tokens are shown

    choice = {"message": message, "finish_reason": turn.get("finish_reason")}
    pieces = toy_tokenizer.generated_pieces(choice)
    if [toy_tokenizer.token_id(piece) for piece in pieces] != list(ids):
        return None
    return pieces


def turn_tokens(turn: Mapping[str, Any], threshold: float = LOW_P) -> TurnTokens | None:
    """A model turn's generated tokens, or None when the turn recorded neither ids nor
    log-probabilities (the run did not set ``run.capture_tokens``)."""
    if "completion_ids" not in turn and "logprobs" not in turn:
        return None
    ids = _ints(turn.get("completion_ids"))
    logprobs = _floats(turn.get("logprobs"))
    source: TextSource | None = None
    texts = _engine_texts(turn, logprobs)
    if texts is not None and (not ids or len(texts) == len(ids)):
        source = "engine"
    else:
        texts = _toy_texts(turn, ids)
        source = "toy tokenizer" if texts is not None else None
    count = max(len(ids), len(logprobs))
    tokens: list[Token] = []
    for index in range(count):
        logprob = logprobs[index] if index < len(logprobs) else None
        p = math.exp(logprob) if logprob is not None else None
        tokens.append(
            Token(
                id=ids[index] if index < len(ids) else None,
                logprob=logprob,
                p=p,
                text=texts[index] if texts is not None and index < len(texts) else None,
                low=p is not None and p < threshold,
            )
        )
    missing = turn.get("missing")
    return TurnTokens(
        threshold=threshold,
        text_source=source,
        tokens=tokens,
        low=sum(token["low"] for token in tokens),
        missing=[str(m) for m in missing] if isinstance(missing, list) else [],
    )


def model_turns(trajectory: Mapping[str, object] | None) -> list[dict[str, Any]]:
    """The trajectory's model turns in order: one for each ``answer`` entry of its
    conversation (:func:`rollgym.trajectory.conversation.conversation`)."""
    turns = (trajectory or {}).get("turns")
    if not isinstance(turns, list):
        return []
    return [t for t in turns if isinstance(t, dict) and t.get("type") == "model"]
