"""Reading a run: its trace store and its files, for people and for programs.

The driver writes a run's files and the trace store takes in its spans; everything that reads
them back lives here, in one place: the store's queries and their rows (``queries``,
``query_rows``, ``failures``, ``span_messages``), ``traces check`` (``check``; ``certify`` for
``--data``), ``traces profile`` (``profile`` and its parts), the terminal's rendering
(``render``, ``report``, ``conversation_report``), ``rollgym compare`` and ``rollgym export``,
and the viewer (``viewer_routes`` and ``run_views`` over ``viewer/``, its page), which
``rollgym traces serve`` hands to the store. It stands above the driver and the store and
below the CLI. Names load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door

#: public name -> the module that defines it
_EXPORTS = {
    "CheckReport": "rollgym.reading.check",
    "check_run": "rollgym.reading.check",
}

__all__ = ["CheckReport", "check_run"]

__getattr__, __dir__ = lazy_door(globals(), _EXPORTS)

if TYPE_CHECKING:
    from rollgym.reading.check import CheckReport, check_run
