"""The engine checked, not trusted: after a weight swap, its log-probabilities of a fixed probe.

The failure a trainer fears most is silent: the engine serving other weights than the trainer
believes (a reload that did not happen, a wrong path, a dtype or a kernel that changes the
numbers). So after each ``set_policy_version(v, weights=..., probe=...)`` every model server
replica is asked for the log-probability of each token of a fixed sequence given the ones
before it (vLLM's ``prompt_logprobs`` on ``/v1/completions``, a token-id prompt, one token
generated), and the answers are compared with the trainer's own numbers for the same
sequence. The gap (mean and max absolute difference) is kept per version and replica:
``Collector.probe_gaps``, ``summary.json``'s ``probes``; a gap over the probe's bound, or a
replica that could not answer, is a warning on the console and in ``summary.json``.

The check never decides anything: a rollout runs and is stamped the same whatever it finds.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rollgym.errors import TransportError
from rollgym.http.client import HttpClient
from rollgym.policy_versions import ANSWER_KEY, PolicyVersion

log = logging.getLogger(__name__)

#: The largest absolute difference of one token's log-probability that is not warned about.
DEFAULT_BOUND = 0.05
_ROUTE = "/v1/completions"
_TIMEOUT_S = 120.0

#: The trainer's log-probabilities of ``token_ids[1:]`` (each given the ones before it),
#: computed when asked (sync or async).
TrainerLogprobs = Callable[[Sequence[int]], Sequence[float] | Awaitable[Sequence[float]]]


@dataclass(frozen=True)
class Probe:
    """A fixed token sequence and the trainer's log-probabilities of it.

    ``logprobs`` holds one number per token after the first (``len(token_ids) - 1``): the
    log-probability of ``token_ids[i]`` given ``token_ids[:i]`` under the weights just handed
    over, or a callable that computes them from the token ids. ``bound``: the largest
    absolute difference of one token that is not warned about.
    """

    token_ids: Sequence[int]
    logprobs: Sequence[float] | TrainerLogprobs
    bound: float = DEFAULT_BOUND

    def __post_init__(self) -> None:
        ids = list(self.token_ids)
        if len(ids) < 2 or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError("Probe.token_ids must be at least two token ids (ints)")
        if not callable(self.logprobs):
            _check_numbers(self.logprobs, len(ids) - 1)
        if not self.bound >= 0:
            raise ValueError(f"Probe.bound must be 0 or more, got {self.bound!r}")

    async def trainer_logprobs(self) -> list[float]:
        """The trainer's numbers (calling its callable, awaited if it is async)."""
        given = self.logprobs
        if callable(given):
            computed = given(list(self.token_ids))
            given = await computed if inspect.isawaitable(computed) else computed
        return _check_numbers(given, len(self.token_ids) - 1)


def _check_numbers(values: object, count: int) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError("Probe.logprobs must be a sequence of numbers or a callable")
    numbers = [float(v) for v in values]
    if len(numbers) != count:
        raise ValueError(
            f"Probe.logprobs must hold one number per token after the first ({count}), "
            f"got {len(numbers)}"
        )
    if not all(math.isfinite(n) for n in numbers):
        raise ValueError("Probe.logprobs must be finite numbers")
    return numbers


@dataclass(frozen=True)
class ProbeGap:
    """What one replica's engine answered for the probe under one version."""

    version: PolicyVersion
    server: str
    url: str
    #: Mean and max absolute difference from the trainer's numbers (None: no answer).
    mean_abs_diff: float | None
    max_abs_diff: float | None
    bound: float
    #: Why the engine's numbers could not be had (None: they were).
    error: str | None = None

    @property
    def over(self) -> bool:
        """Whether this gap is a warning: over the bound, or no numbers to compare."""
        return self.max_abs_diff is None or self.max_abs_diff > self.bound

    def warning(self) -> str:
        where = f"model server {self.server!r} ({self.url}) at policy version {self.version!r}"
        if self.error is not None:
            return f"weight probe: {where}: {self.error}"
        return (
            f"weight probe: {where}: the engine's log-probabilities differ from the trainer's "
            f"by up to {self.max_abs_diff:.4g} (mean {self.mean_abs_diff:.4g}, bound "
            f"{self.bound:g}): the engine may not serve the weights the trainer holds"
        )


def gap(trainer: Sequence[float], engine: Sequence[float]) -> tuple[float, float]:
    """(mean, max) absolute difference of two equally long lists of log-probabilities."""
    diffs = [abs(a - b) for a, b in zip(trainer, engine, strict=True)]
    return sum(diffs) / len(diffs), max(diffs)


def prompt_logprobs(answer: Mapping[str, object], token_ids: Sequence[int]) -> list[float]:
    """The log-probability of each of ``token_ids[1:]`` from vLLM's completion answer
    (``choices[0].prompt_logprobs``: None for the first token, then ``{token id: {"logprob":
    x, ...}}`` holding the prompt's own token); ValueError saying what is missing."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    entries = choice.get("prompt_logprobs") if isinstance(choice, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the engine gave no prompt_logprobs (vLLM gives them on /v1/completions)")
    if len(entries) != len(token_ids):
        raise ValueError(
            f"the engine gave {len(entries)} prompt log-probabilities for {len(token_ids)} tokens"
        )
    numbers = []
    for position, (entry, token) in enumerate(zip(entries[1:], token_ids[1:], strict=True), 1):
        found = entry.get(str(token)) if isinstance(entry, dict) else None
        value = found.get("logprob") if isinstance(found, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"the engine gave no log-probability for token {position} ({token})")
        numbers.append(float(value))
    return numbers


async def engine_logprobs(
    client: HttpClient, name: str, url: str, token_ids: Sequence[int], version: PolicyVersion
) -> list[float]:
    """Ask one replica for its log-probabilities of the probe; ValueError naming what went
    wrong (no answer, a refusal, no numbers, an answer stamped with another version)."""
    body = {
        "prompt": list(token_ids),
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 0,
    }
    try:
        response = await client.post_json(
            name, url + _ROUTE, body, timeout=_TIMEOUT_S, route=_ROUTE, pinned=True
        )
    except TransportError as exc:
        raise ValueError(f"no answer to the probe: {exc}") from None
    if response.status != 200 or not isinstance(response.data, dict):
        raise ValueError(f"the probe was refused: HTTP {response.status} {response.text[:200]}")
    stamped = response.data.get(ANSWER_KEY)
    if stamped is not None and stamped != version:
        raise ValueError(f"the probe's answer is stamped {stamped!r}, not {version!r}")
    return prompt_logprobs(response.data, token_ids)


async def check(
    client: HttpClient,
    replicas: Iterable[tuple[str, str]],
    version: PolicyVersion,
    probe: Probe,
) -> list[ProbeGap]:
    """The probe's gap at every ``(server name, replica URL)``; each one over the bound is
    logged as a warning. The trainer's numbers are computed once."""
    trainer = await probe.trainer_logprobs()
    gaps = []
    for name, url in replicas:
        try:
            engine = await engine_logprobs(client, name, url, probe.token_ids, version)
        except ValueError as exc:
            found = ProbeGap(version, name, url, None, None, probe.bound, str(exc))
        else:
            mean, most = gap(trainer, engine)
            found = ProbeGap(version, name, url, mean, most, probe.bound)
        if found.over:
            log.warning("%s", found.warning())
        gaps.append(found)
    return gaps


@dataclass
class ProbeLog:
    """Every probe's gaps of a Collector, in the order they were checked."""

    gaps: list[ProbeGap] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """``summary.json``'s ``probes``: per version, the largest gap over its replicas."""
        table: dict[str, object] = {}
        for version in dict.fromkeys(g.version for g in self.gaps):
            these = [g for g in self.gaps if g.version == version]
            means = [g.mean_abs_diff for g in these if g.mean_abs_diff is not None]
            maxes = [g.max_abs_diff for g in these if g.max_abs_diff is not None]
            table[str(version)] = {
                "mean_abs_diff": round(max(means), 6) if means else None,
                "max_abs_diff": round(max(maxes), 6) if maxes else None,
                "bound": max(g.bound for g in these),
                "replicas": len(these),
                "over_bound": any(g.over for g in these),
                **({"errors": errors} if (errors := [g.error for g in these if g.error]) else {}),
            }
        return table

    def warnings(self) -> list[str]:
        return [g.warning() for g in self.gaps if g.over]
