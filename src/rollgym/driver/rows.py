"""Task rows in: stream, validate, route, and expand into rollout work items.

The input JSONL is read line by line and never loaded whole, so memory does not grow with the
file. The *task index* is the 0-based count of non-blank lines; errors name the 1-based
physical line. A line that cannot become a rollout is not an exception that stops the run: it
becomes one :class:`~rollgym.driver.outcomes.RolloutFailure` (``invalid_row``), and a readable
row that has nowhere to go becomes one failure per rollout (``unknown_agent`` /
``unknown_route``), never dispatched.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from rollgym.driver.input_file import input_lines
from rollgym.driver.outcomes import RolloutFailure
from rollgym.driver.unique_ids import UniqueIds
from rollgym.errors import ErrorKind, InputError, InvariantBroken
from rollgym.identity import (
    ATTEMPT,
    EXPLICIT_ID,
    ROLLOUT_INDEX,
    STAMPED_FIELDS,
    TASK_INDEX,
    id_problem,
    is_int,
    make_rollout_id,
)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a row's rollouts go. ``episode`` rows post the episode body, others the row."""

    dispatch_name: str
    server_name: str
    episode: bool


class Unroutable(NamedTuple):
    """Why a row cannot be dispatched: its failure kind and a message naming the field."""

    kind: ErrorKind
    message: str


# The per-row and per-rollout records below are plain (not frozen) slotted dataclasses on
# purpose: one is built for every row and every rollout, and a frozen dataclass's __init__
# costs about five times as much (bench/driver_throughput.py). Nothing mutates them.
@dataclass(slots=True)
class TaskRow:
    """A readable row: its place in the input, its explicit id, and where it is routed."""

    task_index: int
    line: int
    row: dict[str, Any]
    explicit_id: str | None
    target: Target | None
    #: When ``target`` is None: why it cannot be dispatched.
    unroutable: Unroutable | None = None


@dataclass(slots=True)
class BadLine:
    """An input line that could not be read as a row; it counts as one failed rollout."""

    task_index: int
    line: int
    message: str
    explicit_id: str | None


@dataclass(slots=True)
class Rollout:
    """One rollout to run: rollout ``rollout_index`` of ``task``."""

    task: TaskRow
    rollout_index: int

    @property
    def target(self) -> Target:
        """Where the rollout is dispatched: :func:`expand` makes rollouts of routed rows only."""
        target = self.task.target
        if target is None:
            raise InvariantBroken(
                f"rollout {self.rollout_index} of task {self.task.task_index} (line "
                f"{self.task.line}) has no target: an unroutable row became a rollout"
            )
        return target

    def rollout_id(self, attempt: int) -> str:
        """The id of this rollout's attempt ``attempt``: the one place the driver derives it."""
        task = self.task
        return make_rollout_id(task.explicit_id, task.task_index, self.rollout_index, attempt)


WorkItem = Rollout | RolloutFailure


def describe(value: object) -> str:
    """``got str '3'``-style rendering of a bad value, short enough for one line."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_row(row: object, *, path: str, line: int) -> dict[str, object]:
    """Return ``row`` if it can become rollouts, else raise :class:`InputError` naming the field."""
    if not isinstance(row, dict):
        raise InputError(f"expected a JSON object, got {describe(row)}", path=path, line=line)
    explicit = row.get(EXPLICIT_ID)
    if EXPLICIT_ID in row and not (isinstance(explicit, str) and explicit):
        raise InputError(
            f"expected a non-empty string, got {describe(explicit)}",
            path=path,
            line=line,
            field=EXPLICIT_ID,
        )
    problem = id_problem(explicit) if isinstance(explicit, str) else None
    if problem is not None:
        raise InputError(problem, path=path, line=line, field=EXPLICIT_ID)
    for name in STAMPED_FIELDS:
        if name in row and not (is_int(row[name]) and row[name] >= 0):
            raise InputError(
                f"expected a non-negative integer (the driver stamps it), got {describe(row[name])}",
                path=path,
                line=line,
                field=name,
            )
    if "agent" in row and not isinstance(row["agent"], str):
        raise InputError(
            f"expected a string, got {describe(row['agent'])}", path=path, line=line, field="agent"
        )
    if "task_id" in row:
        _check_task_id(row["task_id"], path=path, line=line)
    return row


def _check_task_id(value: object, *, path: str, line: int) -> None:
    if isinstance(value, str) or is_int(value):
        return  # a plain label; the row is routed by agent
    if isinstance(value, dict):
        taskset, task_id = value.get("taskset"), value.get("task_id")
        if isinstance(taskset, str) and taskset and (isinstance(task_id, str) or is_int(task_id)):
            return
    raise InputError(
        f"expected {{'taskset': str, 'task_id': str | int}} or a plain label, got {describe(value)}",
        path=path,
        line=line,
        field="task_id",
    )


class Router:
    """Decides each row's :class:`Target` from ``run.agent`` and ``run.environment_routes``."""

    def __init__(
        self,
        *,
        agents: Collection[str],
        environment_routes: Mapping[str, str],
        default_agent: str | None,
    ) -> None:
        self._agents = frozenset(agents)
        self._routes = {ts: Target(env, env, True) for ts, env in environment_routes.items()}
        self._by_agent = {name: Target(name, name, False) for name in self._agents}
        self._default = default_agent

    def route(self, row: Mapping[str, Any], where: str) -> Target | Unroutable:
        """The target, or why there is none (the message names the field at fault)."""
        task_id = row.get("task_id")
        taskset = task_id.get("taskset") if isinstance(task_id, dict) else None
        if taskset is not None and taskset in self._routes:
            return self._routes[taskset]
        agent = row.get("agent", self._default)
        if agent is None:
            if taskset is not None:
                return Unroutable(
                    "unknown_route",
                    f"{where}: field 'task_id': task set {taskset!r} has no route in "
                    f"run.environment_routes (routes: {sorted(self._routes)}) and no agent applies",
                )
            return Unroutable(
                "unknown_route",
                f"{where}: field 'agent': the row names no agent and run.agent is not set",
            )
        target = self._by_agent.get(agent)
        if target is None:
            field = "agent" if "agent" in row else "run.agent"
            return Unroutable(
                "unknown_agent",
                f"{where}: field {field!r}: unknown agent {agent!r} (agents: {sorted(self._agents)})",
            )
        return target


def parse_line(raw: bytes, *, path: str, line: int) -> dict[str, object]:
    """One JSONL line -> a checked row, or :class:`InputError`."""
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc}", path=path, line=line) from None
    return check_row(row, path=path, line=line)


def _entry(
    row_or_error: dict[str, Any] | InputError,
    task_index: int,
    line: int,
    router: Router,
    where: str,
    ids: UniqueIds | None,
) -> TaskRow | BadLine:
    if isinstance(row_or_error, InputError):
        return BadLine(task_index, line, str(row_or_error), None)
    row = row_or_error
    explicit = row.get(EXPLICIT_ID)
    if ids is not None:
        taken = ids.claim(explicit, task_index, line)
        if taken is not None:
            return BadLine(task_index, line, f"{where}: field {EXPLICIT_ID!r}: {taken}", None)
    routed = router.route(row, where)
    if isinstance(routed, Target):
        return TaskRow(task_index, line, row, explicit, routed)
    return TaskRow(task_index, line, row, explicit, None, routed)


#: The byte order mark a UTF-8 file may start with (Windows editors, spreadsheet exports): not
#: part of the first row, so it is skipped rather than refused as malformed JSON.
UTF8_BOM = b"\xef\xbb\xbf"


def read_jsonl(
    path: str | Path, router: Router, ids: UniqueIds | None = None
) -> Iterator[TaskRow | BadLine]:
    """Stream the rows of a JSONL file (plain, gzip, bzip2 or xz), one line in memory at a time.

    ``ids`` (one per run) turns a row whose explicit rollout id collides with an earlier row's
    ids into a :class:`BadLine`.
    """
    name = str(path)
    task_index = 0
    for line_number, raw in enumerate(input_lines(path), start=1):
        if line_number == 1 and raw.startswith(UTF8_BOM):
            raw = raw[len(UTF8_BOM) :]  # the mark some editors and exports start a file with
        if not raw.strip():
            continue
        try:
            parsed: dict[str, Any] | InputError = parse_line(raw, path=name, line=line_number)
        except InputError as exc:
            parsed = exc
        yield _entry(parsed, task_index, line_number, router, f"{name}:{line_number}", ids)
        task_index += 1


def _mapping_entry(
    item: object, position: int, router: Router, source: str, ids: UniqueIds | None
) -> TaskRow | BadLine:
    line = position + 1
    try:
        if type(item) is not dict and isinstance(item, Mapping):
            item = dict(item)  # a plain dict is kept as is: collector rows are copies anyway
        parsed: dict[str, Any] | InputError = check_row(item, path=source, line=line)
    except InputError as exc:
        parsed = exc
    return _entry(parsed, position, line, router, f"{source}:{line}", ids)


def read_mappings(
    rows: Iterable[object], router: Router, source: str = "<rows>", ids: UniqueIds | None = None
) -> Iterator[TaskRow | BadLine]:
    """Rows given by an embedder as mappings; "line" is the 1-based position."""
    for position, item in enumerate(rows):
        yield _mapping_entry(item, position, router, source, ids)


async def aread_mappings(
    rows: AsyncIterable[object],
    router: Router,
    source: str = "<rows>",
    ids: UniqueIds | None = None,
) -> AsyncIterator[TaskRow | BadLine]:
    """Like :func:`read_mappings` for an async iterable of rows."""
    position = 0
    async for item in rows:
        yield _mapping_entry(item, position, router, source, ids)
        position += 1


Skip = Callable[[int, int], bool]


def expand(entry: TaskRow | BadLine, repeats: int, skip: Skip | None = None) -> Iterator[WorkItem]:
    """The work items of one entry: ``repeats`` rollouts, or ready-made failures.

    ``skip(task_index, rollout_index)``, given on resume, drops rollouts already finished in an
    earlier session (a bad line is keyed by rollout index 0).
    """
    if isinstance(entry, BadLine):
        if skip is None or not skip(entry.task_index, 0):
            yield RolloutFailure(
                entry.explicit_id,
                entry.task_index,
                None,
                0,
                None,
                "invalid_row",
                entry.message,
                entry.line,
            )
        return
    for rollout_index in range(repeats):
        if skip is not None and skip(entry.task_index, rollout_index):
            continue
        if entry.target is not None:
            yield Rollout(entry, rollout_index)
        else:
            if entry.unroutable is None:
                raise InvariantBroken(
                    f"task {entry.task_index} (line {entry.line}) has neither a target nor a reason"
                )
            kind, message = entry.unroutable
            yield RolloutFailure(
                Rollout(entry, rollout_index).rollout_id(0),
                entry.task_index,
                rollout_index,
                0,
                None,
                kind,
                message,
                entry.line,
            )


def collector_row(rollout: Rollout, attempt: int) -> dict[str, object]:
    """The task row plus the driver's stamps (an input row's own stamp values are overwritten)."""
    row = dict(rollout.task.row)
    row[TASK_INDEX] = rollout.task.task_index
    row[ROLLOUT_INDEX] = rollout.rollout_index
    row[ATTEMPT] = attempt
    return row


def unstamped(row: Mapping[str, object]) -> dict[str, object]:
    """The row without the driver's stamps: the task of an episode ``/run`` the driver posts.

    Not :func:`rollgym.servers.task_of`, which an agent uses and which also drops the routing
    keys and ``sampling``: an episode keeps those for the environment to read.
    """
    return {key: value for key, value in row.items() if key not in STAMPED_FIELDS}
