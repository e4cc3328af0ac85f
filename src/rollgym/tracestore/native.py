"""Which readers the store decodes with: the compiled ones when they are current, else Python.

``setup.py`` compiles :mod:`rollgym.tracestore.span_rows`, :mod:`rollgym.tracestore.wire_rows`
and :mod:`rollgym.tracestore.record_rows` with mypyc into ``*_native`` copies (C extensions:
the same code, in well under half the time; see docs/design/compiled-twins.md), stamped with
the SHA-256 of the sources they were built from. This module picks once, at import (through
:mod:`rollgym.compiled`):

- the compiled copies, when they exist and their digest matches the ``.py`` files as they are
  now;
- otherwise the pure-Python modules, with a warning when compiled copies exist but are stale
  (a source was edited since the last ``pip install -e .``): an edit is never silently
  ignored, and a stale binary never decodes;
- always the pure-Python modules with ``ROLLGYM_PURE_PYTHON=1`` (the tests use it to compare
  the two).

Both give the same rows for every body (``tests/unit/tracestore/test_wire_rows.py`` and
``test_record_rows.py`` check the two against each other, and the first against the
``opentelemetry-proto`` reference path).
"""

from __future__ import annotations

from types import ModuleType

import rollgym.compiled as _compiled
from rollgym.tracestore import record_rows, span_rows, wire_rows

PURE_PYTHON_ENV = _compiled.PURE_PYTHON_ENV
#: The compiled modules, in the order ``setup.py`` takes their sources' digest.
_SOURCES = (span_rows, wire_rows, record_rows)


def source_digest() -> str:
    """SHA-256 of ``span_rows.py``, ``wire_rows.py`` then ``record_rows.py`` as they are now
    (what setup.py stamps)."""
    return _compiled.source_digest(_SOURCES)


def compiled_readers() -> tuple[ModuleType, ModuleType, ModuleType] | None:
    """The compiled (span_rows, wire_rows, record_rows) if built and current, else None
    (saying why, if stale)."""
    copies = _compiled.current_copies(_SOURCES, source_digest())
    return None if copies is None else (copies[0], copies[1], copies[2])


def choose_readers() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The (span_rows, wire_rows, record_rows) this process uses: compiled when current, else
    Python."""
    if _compiled.wanted():
        compiled = compiled_readers()
        if compiled is not None:
            return compiled
    return span_rows, wire_rows, record_rows


_rows, _wire, _records = choose_readers()
#: ``to_rows`` of the chosen readers (see :func:`rollgym.tracestore.span_rows.to_rows`).
to_rows = _rows.to_rows
#: ``add_span`` of the chosen readers (see :func:`rollgym.tracestore.span_rows.add_span`).
add_span = _rows.add_span
#: ``rows_from_protobuf`` of the chosen readers (see :mod:`rollgym.tracestore.wire_rows`).
rows_from_protobuf = _wire.rows_from_protobuf
#: ``rows_from_records`` of the chosen readers (see :mod:`rollgym.tracestore.record_rows`).
rows_from_records = _records.rows_from_records
#: True when the store decodes with the compiled readers (``bench/ingest.py`` says which).
COMPILED = _wire is not wire_rows
