"""rollgym's OpenTelemetry traces and metrics (contract: TELEMETRY.md, guide: docs/telemetry.md).

Call sites import the submodules they need, behind the gate
(``from rollgym.telemetry.groups import gate``; ``if gate.rollout: from ... import spans``), so
importing this package stays cheap and loads no SDK.
"""

from __future__ import annotations

__all__ = ["context", "groups", "metrics", "names", "setup", "spans"]
