"""The local trace store: OTLP/HTTP in, SQLite on disk; ingest and storage only.

Public names are re-exported here; the modules behind them each do one job (decode, store,
writer, receiver, lifecycle, store_process). What reads the store back (queries, the check,
the profile, the viewer) is :mod:`rollgym.reading`; ``check_run`` and ``CheckReport`` are still
named here too, where programs found them before. They load on first use (PEP 562), so
``rollgym --help``, which adds the store's ``serve`` command from
:mod:`rollgym.tracestore.serve_command`, loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door

#: public name -> the module that defines it
_EXPORTS = {
    "CheckReport": "rollgym.reading.check",
    "TraceStore": "rollgym.tracestore.store",
    "TraceStoreProcess": "rollgym.tracestore.store_process",
    "check_run": "rollgym.reading.check",
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
    from rollgym.reading.check import CheckReport, check_run
    from rollgym.tracestore.store import TraceStore, connect_readonly
    from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
