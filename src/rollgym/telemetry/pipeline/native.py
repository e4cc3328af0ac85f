"""Which span encoder the exporter child uses: the compiled copy of :mod:`.wire` when current.

``setup.py`` compiles :mod:`rollgym.telemetry.pipeline.wire` with mypyc into ``wire_native``,
stamped with the SHA-256 of ``wire.py``; it is used only while that stamp matches the file as it
is now (:mod:`rollgym.compiled`), else, and with ``ROLLGYM_PURE_PYTHON=1``, the pure-Python
encoder. Both write the same bytes (``tests/unit/telemetry/test_compiled_wire.py``); the
compiled one in less CPU a span (``bench/span_encoding.py --compiled``).
"""

from __future__ import annotations

from types import ModuleType

import rollgym.compiled as _compiled
from rollgym.telemetry.pipeline import wire


def source_digest() -> str:
    """SHA-256 of ``wire.py`` as it is now (what setup.py stamps its compiled copy with)."""
    return _compiled.source_digest((wire,))


def compiled_wire() -> ModuleType | None:
    """The compiled encoder if built and current, else None (saying why, if stale)."""
    copies = _compiled.current_copies((wire,), source_digest())
    return None if copies is None else copies[0]


def choose_wire() -> ModuleType:
    """The encoder this process uses: compiled when current and wanted, else :mod:`.wire`."""
    if _compiled.wanted():
        compiled = compiled_wire()
        if compiled is not None:
            return compiled
    return wire


_chosen = choose_wire()
#: ``encode_request`` of the chosen encoder (see :func:`rollgym.telemetry.pipeline.wire.encode_request`).
encode_request = _chosen.encode_request
#: True when the exporter child encodes with the compiled copy.
COMPILED = _chosen is not wire
