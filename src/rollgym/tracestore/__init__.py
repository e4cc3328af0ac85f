"""The local trace store: OTLP/HTTP in, SQLite on disk, queries, contract check, viewer.

Public names are re-exported here; the modules behind them each do one job (decode, store,
writer, receiver, viewer_routes, lifecycle, queries, check, render, store_process).
"""

from rollgym.tracestore.check import CheckReport, check_run
from rollgym.tracestore.store import TraceStore, connect_readonly
from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

__all__ = [
    "CheckReport",
    "TraceStore",
    "TraceStoreProcess",
    "check_run",
    "connect_readonly",
    "start_trace_store",
]
