"""Build step: compile the span encoder and the trace store's decoding modules with mypyc, when
this machine can.

Why: turning OTLP request bytes into rows is the trace store's largest CPU cost per span, and
the two modules that do it (``src/rollgym/tracestore/wire_rows.py``, the protobuf walk, and
``span_rows.py``, the row tuples) are plain typed Python that mypyc (the compiler mypy and
black ship with) turns into C extensions running them in well under half the time
(``bench/decode.py``). On the other end, encoding span records as OTLP protobuf
(``src/rollgym/telemetry/pipeline/wire.py``) is the span exporter child's largest cost
(``bench/span_encoding.py --compiled``). Everything else in ``pyproject.toml`` stays
declarative.

The extensions are built from copies named ``*_native``, stamped with the digest of the
sources they came from, so the ``.py`` files themselves are never shadowed by a stale binary:
rollgym loads the compiled copies only while their digest matches the sources next to them
(see :mod:`rollgym.compiled`), and says so when it does not. Without a C compiler, or with
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
#: (package folder under src/, the modules compiled in the order their digest is taken, the
#: extension group): the order is the one rollgym.tracestore.native and
#: rollgym.telemetry.pipeline.native take the digest in.
GROUPS = (
    ("rollgym/tracestore", ("span_rows", "wire_rows", "record_rows"), "rollgym_tracestore_native"),
    ("rollgym/telemetry/pipeline", ("wire",), "rollgym_pipeline_native"),
)
#: Where the stamped copies are compiled from (``build/`` is git-ignored).
COPY_ROOT = ROOT / "build" / "native-src"


def stamped_copies(folder: str, sources: tuple[str, ...]) -> list[Path]:
    """``<folder>/<module>_native.py`` under COPY_ROOT for each of ``sources``: the source,
    importing the other compiled copies, plus the digest of all the sources."""
    texts = {name: (ROOT / "src" / folder / f"{name}.py").read_bytes() for name in sources}
    digest = hashlib.sha256(b"".join(texts[name] for name in sources)).hexdigest()
    package = COPY_ROOT / folder
    package.mkdir(parents=True, exist_ok=True)
    for parent in [package, *package.relative_to(COPY_ROOT).parents][:-1]:
        (COPY_ROOT / parent / "__init__.py").write_text("")
    dotted = folder.replace("/", ".")
    copies = []
    for name, text in texts.items():
        for other in sources:
            text = text.replace(
                f"from {dotted}.{other} import".encode(),
                f"from {dotted}.{other}_native import".encode(),
            )
        copy = package / f"{name}_native.py"
        copy.write_bytes(text + f'\n\nSOURCE_DIGEST: Final = "{digest}"\n'.encode())
        copies.append(copy)
    return copies


def native_extensions() -> list:
    if os.environ.get("ROLLGYM_PURE_PYTHON") == "1":
        return []
    try:
        from mypyc.build import mypycify

        extensions = []
        for folder, sources, group in GROUPS:
            copies = [str(copy) for copy in stamped_copies(folder, sources)]
            # follow-imports=skip: the modules' other imports (protobuf, the rest of rollgym)
            # stay ordinary Python objects; only these modules are compiled (seconds).
            extensions += mypycify(
                ["--follow-imports=skip", "--ignore-missing-imports", "--config-file=", *copies],
                opt_level="3",
                group_name=group,
            )
        return extensions
    except Exception as exc:  # no mypyc, or it refused a module: the pure-Python modules
        print(
            f"rollgym: not compiling the native modules ({exc}); using pure Python", file=sys.stderr
        )
        return []


class OptionalBuildExt(build_ext):
    """A failed compile (no C compiler, no Python headers) is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(
                f"rollgym: compiling the native modules failed ({exc}); using pure Python",
                file=sys.stderr,
            )

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(
                f"rollgym: compiling {ext.name} failed ({exc}); using pure Python", file=sys.stderr
            )


setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
