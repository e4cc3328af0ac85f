"""The driver's policy version: what is current, and whether a finished result is too old.

The trainer sets the version (``Collector.policy_version``, or ``run.policy_version_file``
for ``rollgym run``); the model servers stamp each call with the version current when it
arrived. When a result comes back, its lag is how far the oldest of its calls is behind the
current version. With ``max_staleness=N`` a result whose lag is over N is never handed over:
:mod:`rollgym.driver.retry` runs it again as a new attempt, or records it as a ``stale``
failure once the attempts are spent.

Integer versions the model servers report that are newer than the driver's (a simulated
engine playing the trainer, or a trainer that updated the engine before telling the driver)
move the current version up: the newest weights known to exist are the current ones.

The clock also keeps what a dispatch carries to the agent: the version the trainer last set
and when (:attr:`PolicyClock.floor_headers`, built once per set, not once per dispatch), the
floor of that dispatch's model calls (:mod:`rollgym.policy_versions`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rollgym.policy_versions import FLOOR_HEADER, PolicyVersion, VersionOrder, encode_floor


class PolicyClock:
    """The current version, the order of labels, and the staleness bound (None: no bound)."""

    __slots__ = ("current", "floor_headers", "max_staleness", "set_ns", "_order")

    def __init__(
        self, version: PolicyVersion | None = None, max_staleness: int | None = None
    ) -> None:
        if max_staleness is not None and max_staleness < 0:
            raise ValueError("max_staleness must be at least 0 (or None for no bound)")
        self._order = VersionOrder()
        self.current: PolicyVersion | None = None
        #: When the trainer last set a version (ns since the epoch, increasing); 0: never.
        self.set_ns = 0
        #: The header a dispatch sends its agent: the set version and ``set_ns`` (None: unset).
        self.floor_headers: dict[str, str] | None = None
        self.max_staleness = max_staleness
        if version is not None:
            self.set(version)

    def set(self, version: PolicyVersion) -> None:
        """The trainer's version from now on: every later dispatch carries it as its floor."""
        self._order.note(version)
        self.current = version
        self.set_ns = max(time.time_ns(), self.set_ns + 1)
        self.floor_headers = {FLOOR_HEADER: encode_floor(version, self.set_ns)}

    def lag(self, versions: Sequence[PolicyVersion]) -> int | None:
        """How far behind the current version the oldest call of a result is (None: unknown).

        Integer versions newer than the current one advance it first."""
        if not versions:
            return None
        current = self.current
        ints = [v for v in versions if isinstance(v, int)]
        if ints and (current is None or isinstance(current, int)):
            newest = max(ints)
            if current is None or newest > current:
                self.current = current = newest
        if current is None:
            return None
        return self._order.lag(current, versions)

    def too_stale(self, lag: int | None) -> bool:
        """Over the bound; a lag that cannot be known (an unordered label) is not judged."""
        bound = self.max_staleness
        return bound is not None and lag is not None and lag > bound
