"""The local trace store: OTLP/HTTP in, SQLite on disk; ingest and storage only.

Public names load on first use (PEP 562), so ``rollgym --help`` loads none of them. What reads
the store back is :mod:`rollgym.reading`; its ``check_run`` and ``CheckReport`` are still named
here, where programs found them before (a name in the table, typed by the mirror below).
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
