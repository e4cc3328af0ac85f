"""Which readers the store decodes with: the compiled ones when they are current, else Python.

``setup.py`` compiles :mod:`rollgym.tracestore.span_rows` and
:mod:`rollgym.tracestore.wire_rows` with mypyc into ``span_rows_native`` and
``wire_rows_native`` (C extensions: the same code, in well under half the time; see
docs/trace-store.md), stamped with the SHA-256 of the sources they were built from. This
module picks once, at import:

- the compiled copies, when they exist and their digest matches the ``.py`` files as they are
  now;
- otherwise the pure-Python modules, with a warning when compiled copies exist but are stale
  (a source was edited since the last ``pip install -e .``): an edit is never silently
  ignored, and a stale binary never decodes;
- always the pure-Python modules with ``ROLLGYM_PURE_PYTHON=1`` (the tests use it to compare
  the two).

Both give the same rows for every body (``tests/unit/tracestore/test_wire_rows.py`` checks the
two against each other and against the ``opentelemetry-proto`` reference path).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from pathlib import Path
from types import ModuleType

from rollgym.tracestore import span_rows, wire_rows

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "ROLLGYM_PURE_PYTHON"
#: The compiled modules, in the order ``setup.py`` takes their sources' digest.
_SOURCES = (span_rows, wire_rows)


def source_digest() -> str:
    """SHA-256 of ``span_rows.py`` then ``wire_rows.py`` as they are now (what setup.py stamps)."""
    return hashlib.sha256(
        b"".join(Path(module.__file__ or "").read_bytes() for module in _SOURCES)
    ).hexdigest()


def compiled_readers() -> tuple[ModuleType, ModuleType] | None:
    """The compiled (span_rows, wire_rows) if built and current, else None (saying why, if
    stale)."""
    try:
        compiled = tuple(
            importlib.import_module(f"{module.__name__}_native") for module in _SOURCES
        )
    except ImportError:
        return None
    current = source_digest()
    if any(getattr(module, "SOURCE_DIGEST", None) != current for module in compiled):
        log.warning(
            "the compiled trace store readers (%s) were built from other versions of "
            "span_rows.py / wire_rows.py; using the pure-Python ones. Rebuild them: "
            "pip install -e .",
            compiled[0].__file__,
        )
        return None
    return compiled[0], compiled[1]


def choose_readers() -> tuple[ModuleType, ModuleType]:
    """The (span_rows, wire_rows) this process uses: compiled when current, else Python."""
    if os.environ.get(PURE_PYTHON_ENV) != "1":
        compiled = compiled_readers()
        if compiled is not None:
            return compiled
    return span_rows, wire_rows


_rows, _wire = choose_readers()
#: ``to_rows`` of the chosen readers (see :func:`rollgym.tracestore.span_rows.to_rows`).
to_rows = _rows.to_rows
#: ``rows_from_protobuf`` of the chosen readers (see :mod:`rollgym.tracestore.wire_rows`).
rows_from_protobuf = _wire.rows_from_protobuf
#: True when the store decodes with the compiled readers (``bench/ingest.py`` says which).
COMPILED = _wire is not wire_rows
