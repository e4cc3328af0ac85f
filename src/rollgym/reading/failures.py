"""Why attempts failed, read from their spans: the viewer's failures panel and its filters.

Two counts are easy to mix up, so this module keeps them apart on purpose:

* **attempts**: every dispatch whose outcome was not ``ok``; a rollout retried twice and then
  answered counts two failed attempts here and no failed rollout;
* **rollouts finally failed**: rollouts whose *last* attempt failed (what ``summary.json``
  counts as ``failed``).

The driver writes the kind of a final failure into ``failures.jsonl``; an earlier attempt's
kind exists only in its trace, so it is derived here the same way the driver names it (the
HTTP status of the agent's answer, a timeout) from the attempt's spans.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypedDict

import orjson

from rollgym.json_types import JsonObject, JsonValue
from rollgym.reading.queries import base_rollout_id, list_rollouts
from rollgym.reading.query_rows import DispatchRow
from rollgym.telemetry import names
from rollgym.tracestore.decode import id_bytes

#: Dispatch outcomes that are a failed attempt.
FAILED_OUTCOMES = (names.OUTCOME_ERROR, names.OUTCOME_TIMEOUT)
#: Failed attempts read per report (a run with more shows the first ones; ``total`` says so).
MAX_ATTEMPTS = 5000
#: Distinct messages kept per group, most frequent first.
MAX_MESSAGES = 5
#: Rollout ids kept per group (links in the panel).
MAX_IDS = 20
_GENERIC = {None, "", "error", "Error"}


class AttemptError(TypedDict):
    error_kind: str
    message: str | None


class ErrorSpan(TypedDict):
    """What :func:`attempt_error` reads of a span (a :class:`SpanRow` has all of it)."""

    kind: int
    start_ns: int
    status_code: int
    status_message: str | None
    attributes: JsonObject
    events: list[JsonValue]


class FailedAttempt(DispatchRow):
    """A failed attempt's dispatch row, why it failed, and whether it was the rollout's last."""

    error_kind: str
    message: str | None
    final: bool


def _kind_from_status(status: object) -> str | None:
    if not isinstance(status, int) or status < 400:
        return None
    if status == 429:
        return "http_429"
    return "http_5xx" if status >= 500 else "http_4xx"


def attempt_error(dispatch: Mapping[str, object], spans: Sequence[ErrorSpan]) -> AttemptError:
    """The failure kind and message of one failed attempt, from its trace's spans."""
    kind: str | None = names.OUTCOME_TIMEOUT if dispatch.get("outcome") == "timeout" else None
    message: str | None = None
    for span in sorted(spans, key=lambda s: s["start_ns"]):
        attributes = span.get("attributes") or {}
        if kind is None and span.get("kind") == 3:  # the driver's (client) call of the agent
            kind = _kind_from_status(attributes.get(names.HTTP_RESPONSE_STATUS_CODE))
        if span.get("status_code") == 2 and span.get("status_message") not in _GENERIC:
            message = message or str(span["status_message"])
        for event in span["events"]:
            if not isinstance(event, dict):
                continue
            if event.get("name") == "exception" and message is None:
                found = event.get("attributes")
                text = found.get("exception.message") if isinstance(found, dict) else None
                message = str(text) if text else None
    if kind is None:
        error_types = [
            str(s["attributes"][names.ERROR_TYPE])
            for s in spans
            if s.get("status_code") == 2 and names.ERROR_TYPE in (s.get("attributes") or {})
        ]
        kind = error_types[0] if error_types else str(dispatch.get("outcome") or "error")
    return {"error_kind": kind, "message": message}


def failed_attempts(conn: sqlite3.Connection) -> tuple[list[FailedAttempt], int]:
    """Failed attempts (dispatch rows with ``error_kind``, ``message`` and ``final``: was it
    the rollout's last attempt), oldest first; and how many the store holds in all."""
    rows: list[DispatchRow] = []
    total = 0
    for outcome in FAILED_OUTCOMES:
        page = list_rollouts(conn, outcome=outcome, limit=MAX_ATTEMPTS)
        total += page["total"]
        rows += page["rows"]
    rows.sort(key=lambda r: r["start_ns"])
    rows = rows[:MAX_ATTEMPTS]
    last: dict[str, str | None] = {}
    failed: list[FailedAttempt] = []
    for row in rows:
        base = base_rollout_id(row["rollout_id"] or "")
        if base not in last:
            last[base] = last_attempt(conn, base)
        error = attempt_error(row, error_spans(conn, row["trace_id"]))
        failed.append(FailedAttempt(**row, **error, final=last[base] == row["rollout_id"]))
    return failed, total


def last_attempt(conn: sqlite3.Connection, base: str) -> str | None:
    """The rollout id of ``base``'s last attempt (``X``, ``X-a1``, ...) in the store: one
    indexed read of two columns (the whole dispatch rows, with their span counts, made the
    panel's first load on thousands of failures take seconds: ``bench/failures_panel.py``)."""
    pattern = re.compile(re.escape(base) + r"(-a\d+)?$")
    best: tuple[int, str] | None = None
    for rollout_id, attempt in conn.execute(
        "SELECT rollout_id, attempt FROM dispatches "
        "WHERE rollout_id = ? OR (rollout_id >= ? AND rollout_id < ?)",
        (base, base + "-a0", base + "-a:"),
    ):
        if rollout_id and pattern.match(rollout_id):
            key = (attempt or 0, rollout_id)
            best = key if best is None or key[0] > best[0] else best
    return best[1] if best else None


def error_spans(conn: sqlite3.Connection, trace_id: str | bytes) -> list[ErrorSpan]:
    """What :func:`attempt_error` reads of a trace, and only that: the columns it looks at,
    attributes decoded only for the spans it reads them of (the driver's client span, the
    spans that failed). Why not :func:`~rollgym.reading.queries.trace_spans`: the panel
    reads up to :data:`MAX_ATTEMPTS` traces on first load, and the whole span (links,
    resource, every attribute) made that several times slower (``bench/failures_panel.py``)."""
    spans: list[ErrorSpan] = []
    for kind, start_ns, status_code, status_message, attributes, events in conn.execute(
        "SELECT kind, start_ns, status_code, status_message, attributes, events FROM spans "
        "WHERE trace_id = ?",
        (trace_id if isinstance(trace_id, bytes) else id_bytes(trace_id),),
    ):
        wanted = kind == 3 or status_code == 2
        spans.append(
            ErrorSpan(
                kind=kind,
                start_ns=start_ns,
                status_code=status_code,
                status_message=status_message,
                attributes=orjson.loads(attributes) if wanted and attributes else {},
                events=orjson.loads(events) if events else [],
            )
        )
    return spans


def groups(rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Rows grouped by ``error_kind``: count, the most frequent messages, the rollout ids."""
    by_kind: dict[str, list[Mapping[str, object]]] = {}
    for row in rows:
        by_kind.setdefault(str(row.get("error_kind") or "unknown"), []).append(row)
    result: list[dict[str, object]] = []
    for kind, members in sorted(by_kind.items(), key=lambda item: (-len(item[1]), item[0])):
        messages = Counter(str(m.get("message") or "(no message recorded)") for m in members)
        result.append(
            {
                "error_kind": kind,
                "count": len(members),
                "messages": [
                    {"message": text, "count": count}
                    for text, count in messages.most_common(MAX_MESSAGES)
                ],
                "rollout_ids": [str(m.get("rollout_id")) for m in members[:MAX_IDS]],
            }
        )
    return result
