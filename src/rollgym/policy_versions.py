"""Policy versions: the names both sides use, and how far behind one version is.

In asynchronous RL the trainer changes the weights while rollouts are in flight. The driver
(``Collector.policy_version``) tells every model server which version is current
(``POST /policy_version``); each model server stamps every answer with the version current
when the request reached it (``policy_version`` in the ``chat.completion`` object, and the
``X-Rollgym-Policy-Version`` response header), and the engine's own label where the engine
reports one. The rollout's usage tally collects them in call order, so the driver knows which
versions each result ran under. This module sits on the ground floor because the driver, the
servers and the trajectory recorder all read the same keys.

The push can arrive late (seconds, under load), so it is not what makes a version hold: each
dispatch carries the driver's version to the agent as a *floor* (:data:`FLOOR_HEADER`), the
agent's model calls carry it on, and a model server that has not heard of that version yet
takes it from the call (:func:`supersedes`) before it stamps the answer. A version set before a
dispatch is then the least any of its model calls is stamped with, however late the push.

A version is an ``int`` (the trainer's step) or a ``str`` label. Lag ("how many versions
behind") is a difference of ints; labels are ordered by when the trainer first set them.
"""

from __future__ import annotations

import json
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
#: The model server's route that reads (GET) and sets (POST ``{"version": v, "set_ns": t}``)
#: the version.
ROUTE = "/policy_version"
#: The request header with the driver's version when a rollout was dispatched (its floor):
#: ``{"version": v, "set_ns": t}`` as ASCII JSON (:func:`encode_floor`). The dispatch sends it
#: to the agent, the agent's model calls send it on.
FLOOR_HEADER = "X-Rollgym-Policy-Floor"


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


def encode_floor(version: PolicyVersion, set_ns: int) -> str:
    """The :data:`FLOOR_HEADER` value: the version and when the trainer set it (ns since the
    epoch), as ASCII JSON (a label may hold any character; an int stays an int)."""
    return json.dumps({"version": version, "set_ns": set_ns}, ensure_ascii=True)


def parse_floor(text: str) -> tuple[PolicyVersion, int] | None:
    """``(version, set_ns)`` of a :data:`FLOOR_HEADER` value; None when it is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    version, set_ns = data.get("version"), data.get("set_ns")
    if not is_version(version) or not isinstance(set_ns, int) or isinstance(set_ns, bool):
        return None
    return version, set_ns


def supersedes(
    version: PolicyVersion, set_ns: int, held: PolicyVersion | None, held_ns: int
) -> bool:
    """Whether ``version``, set at ``set_ns``, replaces the ``held`` one (set at ``held_ns``).

    The one set later wins, whatever its value (a new training run may start again at 0); a
    version the server moved on by itself (a simulated trainer's bump) keeps the time of the
    one it moved on from, so between those two the larger int wins. Nothing held: any wins.
    """
    if held is None:
        return True
    if set_ns != held_ns:
        return set_ns > held_ns
    return isinstance(version, int) and isinstance(held, int) and version > held


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
