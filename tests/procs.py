"""Whether a process is still running, read from /proc (Linux), for the tests that check that
nothing outlives what should have ended it (a killed parent, a stopped driver, a store).

A zombie is dead for that purpose: it runs nothing and holds nothing but its exit status, and
whoever reaps it (init, a subreaper) may do so any time later.
"""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
