"""Which protobuf wire reader the store uses: the compiled one when it is current, else Python.

``setup.py`` compiles :mod:`rollgym.tracestore.wire_rows` with mypyc into
``wire_rows_native`` (a C extension: the same code, about twice as fast; see
docs/trace-store.md), stamped with the SHA-256 of the source it was built from. This module
picks the reader once, at import:

- the compiled copy, when it exists and its digest matches ``wire_rows.py`` as it is now;
- otherwise the pure-Python module, with a warning when a compiled copy exists but is stale
  (``wire_rows.py`` was edited since the last ``pip install -e .``): an edit is never silently
  ignored, and a stale binary never decodes;
- always the pure-Python module with ``ROLLGYM_PURE_PYTHON=1`` (the tests use it to compare
  the two).

Both give the same rows for every body (``tests/unit/tracestore/test_wire_rows.py`` checks the
two readers against each other and against the ``opentelemetry-proto`` reference path).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from pathlib import Path
from types import ModuleType

from rollgym.tracestore import wire_rows

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "ROLLGYM_PURE_PYTHON"
NATIVE_MODULE = "rollgym.tracestore.wire_rows_native"


def source_digest() -> str:
    """SHA-256 of ``wire_rows.py`` as it is on disk now (what ``setup.py`` stamps)."""
    return hashlib.sha256(Path(wire_rows.__file__).read_bytes()).hexdigest()


def compiled_reader() -> ModuleType | None:
    """The compiled reader if it is built and current, else None (logging why not, if stale)."""
    try:
        native = importlib.import_module(NATIVE_MODULE)
    except ImportError:
        return None
    if getattr(native, "SOURCE_DIGEST", None) != source_digest():
        log.warning(
            "the compiled wire reader (%s) was built from another version of wire_rows.py; "
            "using the pure-Python one. Rebuild it: pip install -e .",
            native.__file__,
        )
        return None
    return native


def choose_reader() -> ModuleType:
    """The reader this process uses: compiled when current, pure Python otherwise."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return wire_rows
    return compiled_reader() or wire_rows


reader = choose_reader()
#: ``rows_from_protobuf`` of the chosen reader (see :func:`wire_rows.rows_from_protobuf`).
rows_from_protobuf = reader.rows_from_protobuf
#: True when the store decodes with the compiled reader (shown by ``bench/ingest.py``).
COMPILED = reader is not wire_rows
