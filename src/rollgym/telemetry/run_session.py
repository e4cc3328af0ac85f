"""Which session of a run is dispatching: the ``gym.run.session`` of its dispatch spans.

A run resumed after Ctrl-C or a killed driver dispatches again, under the same rollout id and
attempt, the rollouts the earlier session did not finish. The session index (from
``sessions.jsonl``, :mod:`rollgym.driver.sessions`) tells those dispatches apart: the pair
(rollout id, session) names one dispatch across the run's whole history, and
``rollgym traces check`` holds every dispatch to one span by that pair.

A context variable, not a global: the run sets it around its own work and resets it after,
so an embedder's collector (which sets none) and a second run in the same process are not
affected. No OpenTelemetry import: the driver sets it with tracing off too, for the cost of
one ``ContextVar.set``.
"""

from __future__ import annotations

from contextvars import ContextVar

#: The index of the run session dispatching in this context; None outside ``rollgym run``.
RUN_SESSION: ContextVar[int | None] = ContextVar("rollgym_run_session", default=None)
