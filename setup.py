"""Build step: compile the trace store's decoding modules with mypyc, when this machine can.

Why: turning OTLP request bytes into rows is the trace store's largest CPU cost per span, and
the two modules that do it (``src/rollgym/tracestore/wire_rows.py``, the protobuf walk, and
``span_rows.py``, the row tuples) are plain typed Python that mypyc (the compiler mypy and
black ship with) turns into C extensions running them in well under half the time
(``bench/decode.py``). Everything else in ``pyproject.toml`` stays declarative.

The extensions are built from copies named ``*_native``, stamped with the digest of the
sources they came from, so the ``.py`` files themselves are never shadowed by a stale binary:
rollgym loads the compiled copies only while their digest matches the sources next to them
(see :mod:`rollgym.tracestore.native`), and says so when it does not. Without a C compiler, or with
``ROLLGYM_PURE_PYTHON=1``, nothing is compiled and the pure-Python modules are used: same
rows, only slower.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
PACKAGE = ROOT / "src" / "rollgym" / "tracestore"
#: The modules compiled, in the order their digest is taken (rollgym.tracestore.native).
SOURCES = ("span_rows", "wire_rows")
#: Where the stamped copies are compiled from (``build/`` is git-ignored).
COPY_ROOT = ROOT / "build" / "native-src"


def _stamped_copies() -> list[Path]:
    """``rollgym/tracestore/<module>_native.py`` under COPY_ROOT for each of SOURCES: the
    source, importing the other compiled copies, plus the digest of all the sources."""
    texts = {name: (PACKAGE / f"{name}.py").read_bytes() for name in SOURCES}
    digest = hashlib.sha256(b"".join(texts[name] for name in SOURCES)).hexdigest()
    package = COPY_ROOT / "rollgym" / "tracestore"
    package.mkdir(parents=True, exist_ok=True)
    for folder in (package.parent, package):
        (folder / "__init__.py").write_text("")
    copies = []
    for name, text in texts.items():
        for other in SOURCES:
            text = text.replace(
                f"from rollgym.tracestore.{other} import".encode(),
                f"from rollgym.tracestore.{other}_native import".encode(),
            )
        copy = package / f"{name}_native.py"
        copy.write_bytes(text + f'\n\nSOURCE_DIGEST: Final = "{digest}"\n'.encode())
        copies.append(copy)
    return copies


def _native_extensions() -> list:
    if os.environ.get("ROLLGYM_PURE_PYTHON") == "1":
        return []
    try:
        from mypyc.build import mypycify

        copies = [str(copy) for copy in _stamped_copies()]
        # follow-imports=skip: the readers' other imports (protobuf, the rest of rollgym) stay
        # ordinary Python objects; only these modules are compiled (seconds, not minutes).
        return mypycify(
            ["--follow-imports=skip", "--ignore-missing-imports", "--config-file=", *copies],
            opt_level="3",
            group_name="rollgym_tracestore_native",
        )
    except Exception as exc:  # no mypyc, or it refused a module: the pure-Python readers
        print(
            f"rollgym: not compiling the trace store decoding modules ({exc}); using pure Python",
            file=sys.stderr,
        )
        return []


class OptionalBuildExt(build_ext):
    """A failed compile (no C compiler, no Python headers) is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(
                f"rollgym: compiling the trace store decoding modules failed ({exc}); using pure Python",
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
