"""The local trace store: OTLP/HTTP in, SQLite on disk, queries, contract check, viewer.

Public names are re-exported here; the modules behind them each do one job (decode, store,
writer, receiver, viewer_routes, lifecycle, queries, check, render, store_process). They load
on first use (PEP 562), so ``rollgym --help``, which adds the store's ``serve`` command from
:mod:`rollgym.tracestore.serve_command`, loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door

#: public name -> the module that defines it
_EXPORTS = {
    "CheckReport": "rollgym.tracestore.check",
    "TraceStore": "rollgym.tracestore.store",
    "TraceStoreProcess": "rollgym.tracestore.store_process",
    "check_run": "rollgym.tracestore.check",
    "connect_readonly": "rollgym.tracestore.store",
    "start_trace_store": "rollgym.tracestore.store_process",
}

__all__ = [
    "CheckReport",
    "TraceStore",
    "TraceStoreProcess",
    "check_run",
    "connect_readonly",
    "start_trace_store",
]

__getattr__, __dir__ = lazy_door(globals(), _EXPORTS)

if TYPE_CHECKING:
    from rollgym.tracestore.check import CheckReport, check_run
    from rollgym.tracestore.store import TraceStore, connect_readonly
    from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
