"""The rows the trace store's queries answer, as `TypedDict`s (`queries.py` builds them).

`traces show`, `slowest`, the viewer's routes and the failure report all read these shapes;
naming their keys and types here lets mypy check every reader instead of each indexing an
untyped dict. Nullable columns of the schema (`schema.py`) are `| None` here too.
"""

from __future__ import annotations

from typing import TypedDict

from rollgym.json_types import JsonObject, JsonValue


class LinkRow(TypedDict):
    """One span link: the linked span's name (None when the store lacks it) and ids."""

    name: str | None
    trace_id: str
    span_id: str
    attributes: JsonObject


class SpanRow(TypedDict):
    """One span with its decoded attributes, events, links and resource."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    duration_ms: float
    status_code: int
    status_message: str | None
    rollout_id: str | None
    service_name: str | None
    attributes: JsonObject
    events: list[JsonValue]
    links: list[LinkRow]
    resource: JsonObject


class DispatchRow(TypedDict):
    """One dispatch (one attempt of a rollout) as the rollouts table lists it."""

    rollout_id: str | None
    attempt: int | None
    dispatch_name: str | None
    outcome: str | None
    reward: float | None
    duration_ms: float
    start_ns: int
    span_count: int | None
    trace_id: str
    span_id: str
    is_root: bool
    link_count: int
    run_id: str | None


class AttemptDetail(DispatchRow):
    """A dispatch with every span of its trace (``traces show``)."""

    spans: list[SpanRow]


class SlowDispatch(DispatchRow):
    """A dispatch with its per-span-name self time (``traces slowest``)."""

    self_time_ms: dict[str, float]


class RolloutDetail(TypedDict):
    """A rollout (its id without the attempt suffix) and each of its attempts."""

    rollout_id: str
    attempts: list[AttemptDetail]


class RolloutsPage(TypedDict):
    """One page of the rollouts table; ``total`` counts every row the filter keeps."""

    total: int
    limit: int
    offset: int
    rows: list[DispatchRow]
