"""Spans a run's exporters counted as lost: what ``rollgym traces check`` accepts, by count.

A process that cannot deliver a batch of spans counts it (``spans_dropped``: certainly not
delivered; ``spans_unknown``: sent whole, no answer in time, so the backend may or may not have
stored it) and the driver writes each session's counts on its end line in ``sessions.jsonl``.
Such a loss leaves gaps the check would otherwise flag: a span whose parent is absent, a
rollout's spans in a trace whose dispatch root is absent, a recorded rollout whose trace is
absent. Those are losses, not broken isolation, and the check says so, by count:

every flagged gap of that kind is a *candidate*; each trace with candidates lacks at least as
many spans as it has distinct absent parents, and at least one. When the sum of those lower
bounds is within the spans the run's ended sessions counted lost, every candidate is excused
and reported as such (``counted_losses`` in the report); when it is not, the counts do not
explain the gaps and every candidate stays a violation. A span of one rollout inside another
rollout's dispatch trace is never a candidate: no loss puts a span where it does not belong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: The counts of a session's end line that name spans lost.
LOSS_KINDS = ("spans_dropped", "spans_unknown")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A flagged gap a counted loss may explain: its rule, message and where it is."""

    rule: str
    message: str
    trace_id: bytes
    #: The absent span this gap implies (a parent's id), or None: "some span of the trace".
    absent_span: bytes | None
    where: Mapping[str, object]


@dataclass
class CountedLosses:
    """The candidates of one check, and what the run's sessions counted lost."""

    counted: dict[str, int] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)

    @classmethod
    def of_sessions(cls, sessions: Iterable[Mapping[str, object]]) -> CountedLosses:
        """The losses counted on the end lines of the run's ended sessions."""
        counted = dict.fromkeys(LOSS_KINDS, 0)
        for session in sessions:
            lost = session.get("spans_lost")
            if not isinstance(lost, Mapping):
                continue
            for kind in LOSS_KINDS:
                value = lost.get(kind)
                if isinstance(value, int) and value > 0:
                    counted[kind] += value
        return cls(counted={k: v for k, v in counted.items() if v})

    def add(
        self,
        rule: str,
        message: str,
        trace: bytes,
        where: Mapping[str, object],
        absent_span: bytes | None = None,
    ) -> None:
        """A gap in ``trace`` (its id), flagged by ``rule``; ``absent_span``: the span it
        lacks when known (a parent's id)."""
        self.candidates.append(Candidate(rule, message, trace, absent_span, where))

    def spans_missing_at_least(self) -> int:
        """The fewest spans that must be absent for every candidate's gap (per trace: its
        distinct absent parents, at least one)."""
        absent: dict[bytes, set[bytes]] = {}
        for candidate in self.candidates:
            spans = absent.setdefault(candidate.trace_id, set())
            if candidate.absent_span is not None:
                spans.add(candidate.absent_span)
        return sum(max(1, len(spans)) for spans in absent.values())

    def explained(self) -> bool:
        """Whether the counted losses cover every candidate's gap."""
        return self.spans_missing_at_least() <= sum(self.counted.values())

    def summary(self) -> dict[str, object]:
        """What the report shows: the counts, the gaps they explain, by rule."""
        by_rule: dict[str, int] = {}
        for candidate in self.candidates:
            by_rule[candidate.rule] = by_rule.get(candidate.rule, 0) + 1
        return {
            "spans_counted_lost": dict(self.counted),
            "spans_missing_at_least": self.spans_missing_at_least(),
            "checks_excused": by_rule,
        }
