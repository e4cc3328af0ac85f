"""What a :class:`~rollgym.driver.collector.Collector` is told to do, as one typed value.

:class:`CollectorOptions` holds the Collector's settings (routing, concurrency, retries,
timeouts, trajectories, size limits) and, in its field defaults, the one source of their
defaults: the Collector's keyword arguments default to them, and the ``run:`` block of a job
config (``rollgym.config.RunConfig``) takes its defaults from them too, then builds the value
with ``RunConfig.collector_options()``. It is stdlib only, so the driver imports it without
pydantic or the config's models.

What the Collector is *given* to work with rather than told (the metrics recorders, the
supervisor's rotation, the replica URLs, the agent names the config knows) stays a keyword of
its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from rollgym.defaults import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES


@dataclass(frozen=True)
class CollectorOptions:
    """The Collector's settings; every field has the default a job config has too."""

    #: Agent server for rows that name none.
    agent: str | None = None
    #: Task set name -> environment server whose ``/run`` plays the episode.
    environment_routes: Mapping[str, str] | None = None
    #: Most rollouts in flight at once.
    concurrency: int = 64
    #: Attempts per rollout (transient failures only).
    max_attempts: int = 3
    #: Time limit of one attempt, in seconds.
    timeout_s: float = 300.0
    #: First retry delay; doubles per attempt, with jitter.
    retry_backoff_s: float = 0.5
    #: Ceiling of the retry delay.
    retry_backoff_max_s: float = 30.0
    #: Rollouts per task row.
    repeats: int = 1
    #: Agents return each rollout's turns.
    trajectories: bool = False
    #: Trajectories also hold the engine's token ids and log-probabilities.
    capture_tokens: bool = False
    #: Largest request one attempt sends (None: no limit).
    max_request_bytes: int | None = MAX_REQUEST_BYTES
    #: Largest answer one attempt reads (None: no limit).
    max_response_bytes: int | None = MAX_RESPONSE_BYTES
    #: No result handed over has a model call more than this many policy versions behind the
    #: current one (None: no bound; docs/policy-versions.md).
    max_staleness: int | None = None
    #: Send each server only as many attempts at once as it answers in good time
    #: (:mod:`rollgym.driver.dispatch_window`); False sends all ``concurrency`` at once.
    adaptive_window: bool = True
    #: A result with a model call whose answer was not whole (a cut stream, no finish
    #: reason, usage that disagrees with the tokens): ``retry`` runs it again while attempts
    #: remain, then records an ``incomplete_model_call`` failure; ``accept`` keeps it (the
    #: turn flagged, counted in summary.json).
    incomplete_model_calls: Literal["retry", "accept"] = "retry"


#: The defaults, readable as attributes (``DEFAULTS.concurrency``).
DEFAULTS = CollectorOptions()
