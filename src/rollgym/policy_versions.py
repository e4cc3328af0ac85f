"""Policy versions: the names both sides use, and how far behind one version is.

In asynchronous RL the trainer changes the weights while rollouts are in flight. The driver
(``Collector.policy_version``) tells every model server which version is current
(``POST /policy_version``); each model server stamps every answer with the version current
when the request reached it (``policy_version`` in the ``chat.completion`` object, and the
``X-Rollgym-Policy-Version`` response header), and the engine's own label where the engine
reports one. The rollout's usage tally collects them in call order, so the driver knows which
versions each result ran under. This module sits on the ground floor because the driver, the
servers and the trajectory recorder all read the same keys.

A version is an ``int`` (the trainer's step) or a ``str`` label. Lag ("how many versions
behind") is a difference of ints; labels are ordered by when the trainer first set them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeGuard

PolicyVersion = int | str

#: Where a model server writes the version an answer was generated under.
ANSWER_KEY = "policy_version"
#: The version current when the generation finished, only where it differs from the start.
ANSWER_END_KEY = "policy_version_end"
#: The engine's own weight label for the answer, where the engine reports one.
ENGINE_KEY = "engine_policy_version"
#: vLLM's per-token spans (``[{"version", "start", "end"}]``), where the engine gives them.
TOKEN_SPANS_KEY = "policy_version_tokens"
#: The response header with the same version (for callers that read no body fields).
HEADER = "X-Rollgym-Policy-Version"
#: The model server's route that reads (GET) and sets (POST ``{"version": v}``) the version.
ROUTE = "/policy_version"


def is_version(value: object) -> TypeGuard[PolicyVersion]:
    """A usable version: an int (not a bool) or a non-empty string."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and bool(value))


def version_list(value: object) -> list[PolicyVersion] | None:
    """The versions a JSON list holds, in order (None when ``value`` is not a list)."""
    return [v for v in value if is_version(v)] if isinstance(value, list) else None


def parse_version(text: str) -> PolicyVersion:
    """A version read from a file or header: an int when it looks like one, else the label."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return text


class VersionOrder:
    """Orders versions so that lag is a number: ints by value, labels by first sighting."""

    __slots__ = ("_labels",)

    def __init__(self) -> None:
        self._labels: dict[str, int] = {}

    def note(self, version: PolicyVersion) -> None:
        """Remember a label in the order the trainer set it (ints need nothing)."""
        if isinstance(version, str) and version not in self._labels:
            self._labels[version] = len(self._labels)

    def rank(self, version: PolicyVersion) -> int | None:
        """The position of ``version``; None for a label never set (lag unknown)."""
        if isinstance(version, int):
            return version
        return self._labels.get(version)

    def lag(self, current: PolicyVersion, versions: Iterable[PolicyVersion]) -> int | None:
        """How many versions behind ``current`` the oldest of ``versions`` is (0: fresh).

        None when there are no versions or one of them cannot be ordered against ``current``.
        """
        now = self.rank(current)
        if now is None:
            return None
        oldest: int | None = None
        for version in versions:
            rank = self.rank(version)
            if rank is None:
                return None
            oldest = rank if oldest is None else min(oldest, rank)
        return None if oldest is None else max(0, now - oldest)


def version_range(versions: Sequence[PolicyVersion]) -> tuple[PolicyVersion, PolicyVersion]:
    """(first-ordered, last-ordered) of a non-empty list: ints by value, else call order."""
    if all(isinstance(v, int) for v in versions):
        ints = [int(v) for v in versions]
        return min(ints), max(ints)
    return versions[0], versions[-1]
