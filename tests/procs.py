"""Processes read from /proc (Linux), for the tests that check that nothing outlives what
should have ended it (a killed parent, a stopped driver, a store, a sandbox).

A zombie is dead for that purpose: it runs nothing and holds nothing but its exit status, and
whoever reaps it (init, a subreaper) may do so any time later.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def each_process(*files: str) -> Iterator[tuple[int, list[bytes]]]:
    """Every process now, with the contents of its ``/proc/<pid>/<file>`` for each of
    ``files`` (``stat``, ``cmdline``, ``environ`` ...); one that ends or hides them while
    being read is passed over."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), [(entry / name).read_bytes() for name in files]
        except OSError:
            continue


def zombie(stat: bytes) -> bool:
    """Whether the process of a ``/proc/<pid>/stat`` is a zombie (state ``Z``)."""
    return stat.rsplit(b")", 1)[1].split()[0] == b"Z"


def parent_of(stat: bytes) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` (after the command name, which may hold
    spaces and parentheses)."""
    return int(stat.rsplit(b")", 1)[1].split()[1])
