"""Which event loop every rollgym process runs: uvloop when installed, else asyncio's.

uvloop (the ``fast`` extra) roughly halves the per-request cost of HTTP in aiohttp and uvicorn.
One function decides for the CLI commands, the server processes and Ray actors alike; it
imports nothing heavy, so ``rollgym --help`` stays fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For ``asyncio.Runner(loop_factory=...)``: uvloop's loop, or None for asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
