"""Build step: compile the trace store's protobuf wire reader with mypyc, when this machine can.

Why: turning OTLP request bytes into rows is the trace store's largest CPU cost per span, and
the reader (``src/rollgym/tracestore/wire_rows.py``) is plain typed Python that mypyc (the
compiler mypy and black ship with) turns into a C extension running it about twice as fast
(``bench/decode.py``). Everything else in ``pyproject.toml`` stays declarative.

The extension is built from a copy named ``wire_rows_native``, stamped with the digest of the
source it came from, so ``wire_rows.py`` itself is never shadowed by a stale binary: rollgym
loads the compiled copy only while its digest matches the source next to it (see
:mod:`rollgym.tracestore.native`), and says so when it does not. Without a C compiler, or with
``ROLLGYM_PURE_PYTHON=1``, nothing is compiled and the pure-Python reader is used: same rows,
only slower.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
SOURCE = ROOT / "src" / "rollgym" / "tracestore" / "wire_rows.py"
#: Where the stamped copy is compiled from (``build/`` is git-ignored).
COPY_ROOT = ROOT / "build" / "native-src"


def _stamped_copy() -> Path:
    """``rollgym/tracestore/wire_rows_native.py`` under COPY_ROOT: the source plus its digest."""
    text = SOURCE.read_bytes()
    package = COPY_ROOT / "rollgym" / "tracestore"
    package.mkdir(parents=True, exist_ok=True)
    for folder in (package.parent, package):
        (folder / "__init__.py").write_text("")
    copy = package / "wire_rows_native.py"
    digest = hashlib.sha256(text).hexdigest()
    copy.write_bytes(text + f'\n\nSOURCE_DIGEST: Final = "{digest}"\n'.encode())
    return copy


def _native_extensions() -> list:
    if os.environ.get("ROLLGYM_PURE_PYTHON") == "1":
        return []
    try:
        from mypyc.build import mypycify

        copy = _stamped_copy()
        # follow-imports=skip: the reader's imports (protobuf, the rest of rollgym) stay
        # ordinary Python objects; only this one module is compiled (seconds, not minutes).
        return mypycify(
            ["--follow-imports=skip", "--ignore-missing-imports", "--config-file=", str(copy)],
            opt_level="3",
        )
    except Exception as exc:  # no mypyc, or it refused the module: the pure-Python reader
        print(f"rollgym: not compiling the wire reader ({exc}); using pure Python", file=sys.stderr)
        return []


class OptionalBuildExt(build_ext):
    """A failed compile (no C compiler, no Python headers) is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(
                f"rollgym: compiling the wire reader failed ({exc}); using pure Python",
                file=sys.stderr,
            )

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(
                f"rollgym: compiling {ext.name} failed ({exc}); using pure Python", file=sys.stderr
            )


setup(ext_modules=_native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
