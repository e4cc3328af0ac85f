"""mypyc-compiled copies of pure-Python modules: loaded only while built from the sources as they are.

``setup.py`` compiles a few hot modules (the trace store's readers, the span exporter's
encoder) into ``<module>_native`` C extensions stamped with the SHA-256 of the sources they
were built from. Whoever uses one picks it through :func:`current_copies`: the compiled copies
when they import and their stamp matches the ``.py`` files next to them now, else None (with a
warning when copies exist but are stale: a source edited since the last ``pip install -e .`` is
never silently ignored, and a stale binary never runs). With ``ROLLGYM_PURE_PYTHON=1`` the
pure-Python modules are always used (the tests compare the two that way).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from rollgym.environment_variables import ROLLGYM_PURE_PYTHON

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = ROLLGYM_PURE_PYTHON


def wanted() -> bool:
    """False when ``ROLLGYM_PURE_PYTHON=1`` asks for the pure-Python modules."""
    return os.environ.get(PURE_PYTHON_ENV) != "1"


def source_digest(sources: Sequence[ModuleType]) -> str:
    """SHA-256 of the sources' files in this order, as they are now (what setup.py stamps)."""
    return hashlib.sha256(
        b"".join(Path(module.__file__ or "").read_bytes() for module in sources)
    ).hexdigest()


def current_copies(sources: Sequence[ModuleType], digest: str) -> tuple[ModuleType, ...] | None:
    """The ``<module>_native`` copy of each of ``sources`` if all are built and stamped with
    ``digest`` (:func:`source_digest` of the same modules), else None (saying why, if stale)."""
    try:
        compiled = tuple(importlib.import_module(f"{module.__name__}_native") for module in sources)
    except ImportError:
        return None
    if any(getattr(module, "SOURCE_DIGEST", None) != digest for module in compiled):
        log.warning(
            "the compiled copies of %s (%s) were built from other versions of their sources; "
            "using the pure-Python ones. Rebuild them: pip install -e .",
            ", ".join(module.__name__ for module in sources),
            compiled[0].__file__,
        )
        return None
    return compiled
