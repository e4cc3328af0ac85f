"""The viewer's search over what rollouts said and did: message text, tool calls, errors.

Why on the server and bounded: a run's ``trajectories.jsonl`` can be gigabytes, so the page
cannot load it, and a search must not stall the store it shares a process with. A search reads
the run's files line by line in a worker thread and stops at ``limit`` hits or after
``max_bytes`` read (it then says so: ``truncated``); a line is parsed only when its raw bytes
hold the text (case-insensitive). The trace store adds what only spans know (an error status or
exception of an attempt, a tool span's tool name), by bounded queries.

Where a hit is: ``user`` / ``system`` / ... (a message), ``assistant`` (a model answer),
``tool call`` (a tool name or its arguments), ``tool output``, ``verify``, ``error`` (the
final failure of ``failures.jsonl``), ``span error`` and ``tool span`` (from the store).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from rollgym.driver.output import FAILURES, TRAJECTORIES
from rollgym.json_types import JsonObject
from rollgym.reading.run_reader import json_object_line
from rollgym.telemetry import names
from rollgym.trajectory.conversation import conversation

#: The longest query taken (characters); longer ones are cut.
MAX_QUERY = 200
#: Bytes of the run's files one search reads at most before it stops (``truncated``).
MAX_BYTES = 256 * 1024 * 1024
#: Characters of context on each side of a hit.
CONTEXT = 60


@dataclass(frozen=True)
class Hit:
    """One place a rollout holds the text."""

    rollout_id: str
    where: str
    snippet: str


def _snippet(text: str, needle: str) -> str | None:
    """The text around the first match of ``needle`` (lower case), or None without one."""
    at = text.lower().find(needle)
    if at < 0:
        return None
    start, end = max(0, at - CONTEXT), min(len(text), at + len(needle) + CONTEXT)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _texts(trajectory: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every message, answer, tool call and verification."""
    for entry in conversation(trajectory):
        kind = entry.get("kind")
        if kind in ("message", "answer"):
            where = "assistant" if kind == "answer" else str(entry.get("role"))
            yield where, entry.get("content") or ""
            for call in entry.get("tool_calls") or []:
                function = call.get("function")
                if isinstance(function, dict):
                    yield "tool call", f"{function.get('name')}({function.get('arguments')})"
        elif kind == "tool":
            arguments = orjson.dumps(entry.get("arguments")).decode()
            yield "tool call", f"{entry.get('name')}({arguments})"
            yield "tool output", entry.get("output") or ""
        elif kind == "verify":
            yield "verify", entry.get("answer") or ""


class _Budget:
    """Bytes left to read and hits left to find, shared by every source of one search."""

    def __init__(self, limit: int, max_bytes: int) -> None:
        self.hits: list[Hit] = []
        self.limit = limit
        self.bytes_left = max_bytes
        self.truncated = False
        self._seen: set[tuple[str, str]] = set()

    @property
    def full(self) -> bool:
        return len(self.hits) >= self.limit

    def has(self, rollout_id: str, where: str) -> bool:
        return (rollout_id, where) in self._seen

    def add(self, rollout_id: str, where: str, snippet: str) -> None:
        if (rollout_id, where) not in self._seen and not self.full:  # one hit a place
            self._seen.add((rollout_id, where))
            self.hits.append(Hit(rollout_id, where, snippet))

    def lines(self, path: Path, needle: bytes) -> Iterator[JsonObject]:
        """The records of ``path`` whose raw line holds ``needle``, within the budget."""
        if not path.exists():
            return
        with open(path, "rb") as handle:
            for raw in handle:
                if self.full:
                    return
                self.bytes_left -= len(raw)
                if self.bytes_left < 0:
                    self.truncated = True
                    return
                record = json_object_line(raw) if needle in raw.lower() else None
                if record is not None:
                    yield record


def search_files(run_dir: Path, needle: str, budget: _Budget) -> None:
    """Hits in the trajectories (messages, tools) and the final failures (errors)."""
    raw = needle.encode()
    for record in budget.lines(run_dir / TRAJECTORIES, raw):
        trajectory = record.get("trajectory")
        if isinstance(trajectory, dict):
            for where, text in _texts(trajectory):
                snippet = _snippet(text, needle)
                if snippet is not None:
                    budget.add(str(record.get("rollout_id")), where, snippet)
    for record in budget.lines(run_dir / FAILURES, raw):
        text = f"{record.get('error_kind')}: {record.get('message')}"
        snippet = _snippet(text, needle)
        if snippet is not None:
            name = record.get("rollout_id")
            budget.add(
                name if isinstance(name, str) else f"input line {record.get('line')}",
                "error",
                snippet,
            )


_SPAN_ERRORS = """
SELECT rollout_id, name, status_message FROM spans
WHERE rollout_id IS NOT NULL AND status_code = 2 AND instr(lower(status_message), ?) > 0
LIMIT ?
"""
_TOOL_SPANS = f"""
SELECT rollout_id, json_extract(attributes, '$."{names.ENV_TOOL_NAME}"') AS tool FROM spans
WHERE rollout_id IS NOT NULL AND name = '{names.SPAN_ENV_TOOL}'
  AND instr(lower(tool), ?) > 0
LIMIT ?
"""


def search_store(conn: sqlite3.Connection, needle: str, budget: _Budget) -> None:
    """Hits only the spans know: an attempt's error status, a tool span's tool name."""
    left = budget.limit - len(budget.hits)
    for rollout_id, span, message in conn.execute(_SPAN_ERRORS, (needle, left)).fetchall():
        budget.add(rollout_id, "span error", f"{span}: {_snippet(message, needle)}")
    left = budget.limit - len(budget.hits)
    if left > 0:
        for rollout_id, tool in conn.execute(_TOOL_SPANS, (needle, left)).fetchall():
            if not budget.has(rollout_id, "tool call"):  # the trajectory said it already
                budget.add(rollout_id, "tool span", str(tool))


def search_run(
    run_dir: Path | None,
    conn: sqlite3.Connection | None,
    query: str,
    limit: int = 50,
    max_bytes: int = MAX_BYTES,
) -> dict[str, object]:
    """Rollouts whose messages, tool calls or errors hold ``query`` (case-insensitive)."""
    needle = query.strip()[:MAX_QUERY].lower()
    budget = _Budget(limit, max_bytes)
    if needle:
        if run_dir is not None:
            search_files(run_dir, needle, budget)
        if conn is not None and not budget.full:
            search_store(conn, needle, budget)
    return {
        "query": needle,
        "hits": [asdict(hit) for hit in budget.hits],
        "limit": limit,
        "full": budget.full,
        "truncated": budget.truncated,
    }
