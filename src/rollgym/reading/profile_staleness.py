"""The profile's staleness section: how far behind the policy each dispatch ran.

Read from the dispatch spans alone (``gym.policy.lag``, ``gym.policy.version.min`` /
``.max``: docs/policy-versions.md), in one query, so the profile's pass over the run's spans
is untouched. Empty when no dispatch carried policy versions (a run without them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import apsw

from rollgym.telemetry import names

_DISPATCH_VERSIONS = f"""
SELECT json_extract(s.attributes, '$."{names.POLICY_LAG}"'),
  json_extract(s.attributes, '$."{names.POLICY_VERSION_MIN}"'),
  json_extract(s.attributes, '$."{names.POLICY_VERSION_MAX}"')
FROM dispatches d JOIN spans s ON s.trace_id = d.trace_id AND s.span_id = d.span_id
WHERE json_extract(s.attributes, '$."{names.POLICY_VERSION_MIN}"') IS NOT NULL
"""


def policy_staleness(conn: apsw.Connection) -> dict[str, Any]:
    """``{"dispatches", "by_lag": {lag: n}, "spanning": n}``: dispatches per lag, and how many
    ran their calls under more than one version; ``{}`` without versions."""
    by_lag: Counter[int] = Counter()
    spanning = count = 0
    for lag, low, high in conn.execute(_DISPATCH_VERSIONS):
        count += 1
        if isinstance(lag, int):
            by_lag[lag] += 1
        spanning += low != high
    if not count:
        return {}
    return {
        "dispatches": count,
        "by_lag": {str(lag): by_lag[lag] for lag in sorted(by_lag)},
        "spanning": spanning,
    }
