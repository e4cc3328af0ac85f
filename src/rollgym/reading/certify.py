"""``rollgym traces check --data``: every trajectory held against the engine's own record and
against its own invariants, so a trainer can take what the run wrote as ground truth.

A capture bug that writes a well-formed record is the worst kind for RL (a log-probability
off by one token can collapse training while every metric looks fine), and rollgym holds both
sides: the trajectory the agent's side recorded and, per model call, the engine's own count
(vLLM's ``llm_request`` span in the run's trace store; for an engine without spans, llama.cpp's
server, the ``usage`` it answered). Each rule below is checked on every model turn of every
committed trajectory, and a violation names the rollout, the turn (the model call's number,
the ``<turn>`` of its request id) and the rule. docs/trajectories.md ("Certified data") says
rule by rule what passing means.

:class:`Certifier` checks one trajectory line (``export --certified-only`` calls it line by
line); :func:`certify_run` checks a whole run for ``traces check --data``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from rollgym.driver.output import ROLLOUTS, TRAJECTORIES
from rollgym.identity import is_int, request_id_of, rollout_of_request_id
from rollgym.policy_versions import ANSWER_KEY, is_version
from rollgym.reading.config_diff import read_config
from rollgym.reading.engine_calls import EngineCall, engine_calls
from rollgym.reading.engine_ids import sent_request_id
from rollgym.reading.run_reader import committed_trajectories, read_lines
from rollgym.records import fields_record
from rollgym.servers.request_ids import upstream_uuid

Rule = Literal[
    "token_counts",
    "prompt_extends",
    "logprobs_cover",
    "finish_reason",
    "policy_version",
    "dropped_choice",
    "incomplete",
]
#: Every rule, in the order a report lists them.
RULES: tuple[Rule, ...] = get_args(Rule)


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (rollout, model call; None for the rollout as a whole) and what."""

    rollout_id: str
    turn: int | None
    rule: Rule
    message: str

    def line(self) -> str:
        """``3-0 turn 2: token_counts: ...``: the one line ``traces check --data`` prints."""
        where = "rollout" if self.turn is None else f"turn {self.turn}"
        return f"{self.rollout_id} {where}: {self.rule}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return fields_record(self)


@dataclass
class DataReport:
    """What ``traces check --data`` found: every violation, counts per rule, what was held."""

    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    rollouts: int = 0
    model_calls: int = 0
    #: Rollouts with at least one violation (``export --certified-only`` leaves them out).
    uncertified: int = 0
    #: What the token counts were held against: the engine's spans, or the answered usage.
    engine_record: str = ""
    #: Why every call must carry a policy version, or why not.
    versions: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, found: Sequence[Violation]) -> None:
        self.rollouts += 1
        if found:
            self.uncertified += 1
        for violation in found:
            self.violations.append(violation)
            self.counts[violation.rule] = self.counts.get(violation.rule, 0) + 1

    def as_dict(self) -> dict[str, object]:
        """The report as ``traces check --data --json`` prints it."""
        return {
            "ok": self.ok,
            "violation_counts": {rule: self.counts[rule] for rule in RULES if rule in self.counts},
            "rollouts": self.rollouts,
            "uncertified_rollouts": self.uncertified,
            "model_calls": self.model_calls,
            "engine_record": self.engine_record,
            "policy_versions": self.versions,
            "violations": [v.as_dict() for v in self.violations],
        }


_Add = Callable[[int | None, Rule, str], None]


def _count(value: object) -> int | None:
    return value if is_int(value) else None


def _ids(value: object) -> list[int] | None:
    return value if isinstance(value, list) else None


def _usage(turn: Mapping[str, object]) -> tuple[int | None, int | None] | None:
    usage = turn.get("usage")
    if not isinstance(usage, dict):
        return None
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _choices(turn: Mapping[str, object]) -> int:
    """How many choices the engine answered for this call (``n``; 1 when it says none)."""
    n = turn.get("n")
    return n if is_int(n) and n > 1 else 1


def _first_difference(left: Sequence[int], right: Sequence[int]) -> int:
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return index
    return min(len(left), len(right))


class Certifier:
    """The rules, with what the run recorded around its trajectories.

    ``engine``: the engine's own count of each call, by the request id as sent (empty: the
    engine exported no spans, so the answered usage is the record). ``versions_required``:
    the run ran under policy versions, so every call must carry one. ``unsampled``: rollouts
    whose trace the sampler dropped (no engine span is expected for their calls).
    """

    def __init__(
        self,
        engine: Mapping[str, EngineCall],
        *,
        versions_required: bool,
        unsampled: frozenset[str] = frozenset(),
    ) -> None:
        self.engine = engine
        self.versions_required = versions_required
        self.unsampled = unsampled

    def check(self, record: Mapping[str, object]) -> list[Violation]:
        """The violations of one ``trajectories.jsonl`` line (empty: certified)."""
        rollout_id = str(record.get("rollout_id"))
        found: list[Violation] = []

        def add(turn: int | None, rule: Rule, message: str) -> None:
            found.append(Violation(rollout_id, turn, rule, message))

        trajectory = record.get("trajectory")
        if not isinstance(trajectory, dict):
            add(None, "incomplete", "its line holds no trajectory")
            return found
        dropped = trajectory.get("dropped_turns")
        if is_int(dropped) and dropped > 0:
            add(
                None,
                "incomplete",
                f"{dropped} turns past the most one trajectory keeps were dropped",
            )
        tokens = trajectory.get("capture") == "tokens"
        expect_spans = bool(self.engine) and rollout_id not in self.unsampled
        previous: list[int] | None = None
        for index, turn in enumerate(_model_turns(trajectory)):
            call = turn.get("call")
            number = call if is_int(call) else index
            self._answer(turn, number, add)
            self._counts(rollout_id, turn, number, expect_spans=expect_spans, add=add)
            if tokens:
                previous = _extends(turn, number, previous, add)
                _logprobs(turn, number, add)
        return found

    def _answer(self, turn: Mapping[str, object], call: int, add: _Add) -> None:
        """Finish reason, whole answer, every choice kept, policy version."""
        reason = turn.get("finish_reason")
        if not isinstance(reason, str) or not reason:
            add(call, "finish_reason", "the call has no finish reason")
        cut = turn.get("incomplete")
        if cut:
            add(call, "incomplete", f"the answer was cut: {cut}")
        if turn.get("stream_incomplete"):
            add(call, "incomplete", "its stream ended before [DONE]")
        n = _choices(turn)
        if n > 1:
            others = turn.get("other_choices")
            kept = 1 + (len(others) if isinstance(others, list) else 0)
            if kept < n:
                add(call, "dropped_choice", f"the engine answered {n} choices, {kept} kept")
        if self.versions_required and not is_version(turn.get(ANSWER_KEY)):
            add(call, "policy_version", "the call carries no policy version")

    def _counts(
        self,
        rollout_id: str,
        turn: Mapping[str, object],
        call: int,
        *,
        expect_spans: bool,
        add: _Add,
    ) -> None:
        """The ids recorded, the usage answered and the engine's span agree on the counts."""
        usage = _usage(turn)
        request_id = _request_id(rollout_id, turn, call)
        engine = self.engine.get(request_id) or self.engine.get(upstream_uuid(request_id))
        if usage is None:
            add(call, "token_counts", "the engine answered no usage")
        if engine is None and expect_spans:
            add(call, "token_counts", f"no engine span for request {request_id} in the trace store")
        answered = usage or (None, None)
        if engine is not None:
            for what, said, counted in (
                ("prompt", answered[0], engine.prompt_tokens),
                ("completion", answered[1], engine.completion_tokens),
            ):
                if said is not None and counted is not None and said != counted:
                    add(
                        call,
                        "token_counts",
                        f"{what} tokens: {said} answered in usage, {counted} in the engine's span",
                    )
        prompt = _prompt_length(turn)
        completion = _completion_length(turn)
        for what, recorded, said, counted in (
            ("prompt", prompt, answered[0], engine.prompt_tokens if engine else None),
            ("completion", completion, answered[1], engine.completion_tokens if engine else None),
        ):
            reference, source = (said, "usage") if said is not None else (counted, "engine span")
            if recorded is not None and reference is not None and recorded != reference:
                add(
                    call,
                    "token_counts",
                    f"{what} tokens: {recorded} ids recorded, {reference} in the {source}",
                )


def _model_turns(trajectory: Mapping[str, object]) -> Iterator[Mapping[str, object]]:
    turns = trajectory.get("turns")
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict) and turn.get("type") == "model":
            yield turn


def _request_id(rollout_id: str, turn: Mapping[str, object], call: int) -> str:
    """The ``X-Request-Id`` this call went out with: the turn's ``request_id``; else the one
    the engine's answer id carries (vLLM answers ``chatcmpl-<that>``); else the one the
    rollout's context derives (``<rollout id>.<call>``)."""
    sent = turn.get("request_id")
    if isinstance(sent, str) and sent:
        return sent
    answer_id = turn.get("response_id")
    if isinstance(answer_id, str):
        carried = sent_request_id(answer_id)
        if rollout_of_request_id(carried) == rollout_id:
            return carried
    return request_id_of(rollout_id, call)


def _prompt_length(turn: Mapping[str, object]) -> int | None:
    """The whole prompt's length: the part shared with the previous call, then what is new."""
    ids = _ids(turn.get("prompt_ids"))
    if ids is None:
        return None
    start = turn.get("prompt_start")
    return (start if is_int(start) else 0) + len(ids)


def _completion_length(turn: Mapping[str, object]) -> int | None:
    """Tokens generated for this call: the kept choice's, plus every other choice's when the
    engine answered several (its usage counts them all); None when they cannot be counted."""
    ids = _ids(turn.get("completion_ids"))
    if ids is None:
        return None
    if _choices(turn) == 1:
        return len(ids)
    others = turn.get("other_choices")
    total = len(ids)
    for other in others if isinstance(others, list) else []:
        other_ids = _ids(other.get("completion_ids")) if isinstance(other, dict) else None
        if other_ids is None:
            return None
        total += len(other_ids)
    return total


def _extends(
    turn: Mapping[str, object], call: int, previous: list[int] | None, add: _Add
) -> list[int] | None:
    """Check that this call's prompt starts with the previous call's prompt and completion,
    token for token; return this call's prompt and completion (None: no ids to go on).

    A turn without ids says why (``tokens_missing``, ``missing``), and the next one has no
    previous sequence to extend. A turn that stored only what is new (``prompt_start > 0``)
    extends by construction, so its start must be exactly the previous sequence's length."""
    ids = _ids(turn.get("prompt_ids"))
    completion = _ids(turn.get("completion_ids"))
    if ids is None or completion is None:
        return None
    start = turn.get("prompt_start")
    start = start if is_int(start) else 0
    if previous is None:
        if start:
            add(call, "prompt_extends", f"its prompt starts at token {start} of no previous call")
            return None
        return [*ids, *completion]
    if start:
        if start != len(previous):
            add(
                call,
                "prompt_extends",
                f"its prompt continues at token {start}, but the previous call's prompt and "
                f"completion are {len(previous)} tokens",
            )
            return None
        previous += ids
        previous += completion
        return previous
    if ids[: len(previous)] != previous:
        at = _first_difference(ids, previous)
        add(
            call,
            "prompt_extends",
            f"its prompt does not extend the previous call's prompt and completion: they "
            f"differ at token {at} (retokenization drift)",
        )
    return [*ids, *completion]


def _logprobs(turn: Mapping[str, object], call: int, add: _Add) -> None:
    """One log-probability per generated token (the ids' count; without ids, the usage's)."""
    logprobs = turn.get("logprobs")
    if not isinstance(logprobs, list):
        add(call, "logprobs_cover", "the engine answered no log-probabilities")
        return
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in logprobs):
        add(call, "logprobs_cover", "a log-probability is not a number")
    completion = _ids(turn.get("completion_ids"))
    if completion is not None:
        if len(logprobs) != len(completion):
            add(
                call,
                "logprobs_cover",
                f"{len(logprobs)} log-probabilities for {len(completion)} completion tokens",
            )
        return
    usage = _usage(turn)
    generated = usage[1] if usage is not None and _choices(turn) == 1 else None
    if generated is not None and len(logprobs) != generated:
        add(
            call,
            "logprobs_cover",
            f"{len(logprobs)} log-probabilities for {generated} completion tokens (usage)",
        )


@dataclass(frozen=True)
class RunFacts:
    """What the run's own record says around its trajectories."""

    #: Why every call must carry a policy version ("" when the run used none).
    versions_reason: str
    #: Rollouts whose trace the sampler dropped.
    unsampled: frozenset[str]


def run_facts(run_dir: Path) -> RunFacts:
    """Whether the run used policy versions, from its record: ``run.policy_version_file`` in
    its ``config.yaml``, or a rollout line that ran under versions (``policy_versions``); and
    which rollouts' traces were not sampled."""
    reason = ""
    run = _config_run_block(run_dir)
    if isinstance(run, dict) and run.get("policy_version_file"):
        reason = f"run.policy_version_file is set ({run['policy_version_file']})"
    unsampled: set[str] = set()
    for line in read_lines(run_dir / ROLLOUTS):
        rollout_id = line.get("rollout_id")
        versions = line.get("policy_versions")
        if not reason and isinstance(versions, list) and versions:
            reason = f"rollout {rollout_id} ran under policy versions {versions[:3]}"
        if line.get("trace_sampled") is False and isinstance(rollout_id, str):
            unsampled.add(rollout_id)
    return RunFacts(reason, frozenset(unsampled))


def _config_run_block(run_dir: Path) -> Mapping[str, object] | None:
    """The ``run:`` block of the config the run wrote beside its files (None: none readable)."""
    run = read_config(run_dir).get("run")
    return run if isinstance(run, dict) else None


def certifier_for(run_dir: Path, conn: sqlite3.Connection | None) -> tuple[Certifier, DataReport]:
    """A certifier for the run in ``run_dir`` (``conn``: its trace store, None when it has
    none) and an empty report saying what it holds the data against."""
    facts = run_facts(run_dir)
    engine = engine_calls(conn) if conn is not None else {}
    report = DataReport()
    if engine:
        report.engine_record = (
            f"{sum(call.spans for call in engine.values())} engine spans "
            f"({len(engine)} calls) and the answered usage"
        )
    elif conn is None:
        report.engine_record = "the answered usage (no trace store in the run directory)"
    else:
        report.engine_record = "the answered usage (the trace store holds no engine spans)"
    report.versions = (
        f"required on every call: {facts.versions_reason}"
        if facts.versions_reason
        else "not required: the run used none"
    )
    certifier = Certifier(
        engine, versions_required=bool(facts.versions_reason), unsampled=facts.unsampled
    )
    return certifier, report


def certify_run(run_dir: Path, conn: sqlite3.Connection | None) -> DataReport:
    """Every committed trajectory of the run in ``run_dir`` held to every rule.

    Raises FileNotFoundError when the run wrote no ``trajectories.jsonl`` and
    :class:`~rollgym.reading.run_reader.UnreadableLine` for a committed line that is not JSON.
    """
    path = run_dir / TRAJECTORIES
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: run with run.trajectories=true or run.capture_tokens=true"
        )
    certifier, report = certifier_for(run_dir, conn)
    for record in committed_trajectories(run_dir):
        report.model_calls += sum(1 for _ in _model_turns(_trajectory_of(record)))
        report.add(certifier.check(record))
    return report


def _trajectory_of(record: Mapping[str, object]) -> Mapping[str, object]:
    trajectory = record.get("trajectory")
    return trajectory if isinstance(trajectory, dict) else {}
