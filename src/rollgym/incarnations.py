"""``servers.jsonl``: each launched server process's incarnations over the run's history.

When a server process dies mid-run (killed, crashed, its Ray actor lost), the spans still
queued in it are never exported: a model server's span then names a parent (the agent's
client span) that no store has, although nothing broke the trace contract. ``rollgym traces
check`` can tell that loss from a real one only if the run says which process served where,
and when it died. So the supervisor appends one line when it starts watching a replica (an
incarnation begins: instance, pid, address, time, session) and one when it finds the replica
ended (the incarnation died: time, how it ended); a restart on the same port begins a new
incarnation. Incarnations with no ``died`` line ended with their session (stopped, or killed
with the driver: :mod:`rollgym.driver.sessions` knows which).

Best effort: a line that cannot be written (a full disk) only makes the check stricter.

On the ground floor (plain values, no placement types) because two layers share the format:
``placement/supervisor.py`` writes it and ``reading/check.py`` reads it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SERVERS = "servers.jsonl"


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One process of one replica, from its start to its death (``died_at`` None: it did not
    die mid-run)."""

    instance: str
    pid: int | None
    host: str | None
    port: int | None
    started_at: float
    session: int | None
    died_at: float | None = None
    exit: str | None = None

    @property
    def label(self) -> str:
        """``agent@1 pid 4242`` (how a report names it)."""
        return f"{self.instance} pid {self.pid}" if self.pid is not None else self.instance


class IncarnationLog:
    """Appends incarnation lines to ``<output_dir>/servers.jsonl``."""

    def __init__(self, output_dir: Path, session: int | None) -> None:
        self._path = output_dir / SERVERS
        self._session = session

    def started(self, instance: str, pid: int | None, host: str | None, port: int | None) -> None:
        """A process (now healthy) serves as ``instance`` at ``host:port``: a new incarnation."""
        self._append(
            {
                "event": "start",
                "instance": instance,
                "pid": pid,
                "host": host,
                "port": port,
                "at": time.time(),
                "session": self._session,
            }
        )

    def died(self, instance: str, pid: int | None, status: str) -> None:
        """The supervisor found ``instance``'s process ended mid-run (``status``: how)."""
        self._append(
            {
                "event": "died",
                "instance": instance,
                "pid": pid,
                "at": time.time(),
                "exit": status,
                "session": self._session,
            }
        )

    def _append(self, record: Mapping[str, object]) -> None:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        with contextlib.suppress(OSError), open(self._path, "ab", buffering=0) as out:
            out.write(line)


def read_incarnations(run_dir: Path) -> list[Incarnation]:
    """Every incarnation the run recorded, in start order, each with its death if it died."""
    try:
        data = (run_dir / SERVERS).read_bytes()
    except OSError:
        return []
    started: list[dict[str, object]] = []
    for raw in data.splitlines():
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a torn last line: the driver was killed while writing it
        if not isinstance(record, dict):
            continue
        if record.get("event") == "start":
            started.append(dict(record))
        elif record.get("event") == "died":
            for entry in reversed(started):  # the latest incarnation of that instance
                if entry.get("instance") == record.get("instance") and "died_at" not in entry:
                    entry["died_at"] = record.get("at")
                    entry["exit"] = record.get("exit")
                    break
    return [_incarnation(entry) for entry in started]


def _incarnation(entry: dict[str, Any]) -> Incarnation:
    def number(key: str) -> int | None:
        value = entry.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    died = entry.get("died_at")
    return Incarnation(
        instance=str(entry.get("instance")),
        pid=number("pid"),
        host=entry.get("host") if isinstance(entry.get("host"), str) else None,
        port=number("port"),
        started_at=float(entry.get("at") or 0.0),
        session=number("session"),
        died_at=float(died) if isinstance(died, (int, float)) else None,
        exit=str(entry.get("exit")) if entry.get("exit") is not None else None,
    )
