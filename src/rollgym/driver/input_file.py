"""The rows input, plain or compressed: its lines as bytes, read as a stream.

Datasets travel compressed (``rows.jsonl.gz`` from a dataset hub, ``.xz`` or ``.bz2`` from an
archive). The compression is told by the file's first bytes, not its name, so a renamed file
reads the same; gzip, bzip2 and xz are read with Python's own modules, one line in memory at
a time as for a plain file. Zstandard has no module in the Python rollgym supports: such a file
is refused before the run starts, saying how to decompress it. Without this a compressed file
was read as text: every line "malformed JSON", and the run ended with one failure per chunk of
compressed bytes.

The checksum that ties a resume to its input is of the file's bytes as they are on disk, so
compressing or decompressing the input between two sessions is a change of input.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path

from rollgym.errors import InputError

#: The first bytes of a gzip, a bzip2 and an xz file (the formats rollgym reads).
GZIP_MAGIC, BZIP2_MAGIC, XZ_MAGIC = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00"
#: The first bytes of a Zstandard frame (RFC 8878).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: What reading the input raises part way: a damaged compressed stream (truncated, corrupt),
#: or a disk that fails under any file.
_UNREADABLE = (EOFError, OSError, zlib.error, lzma.LZMAError)


def _first_bytes(path: Path | str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(6)


def compression_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be read as rows because of how it is compressed; None when it can."""
    if _first_bytes(path).startswith(ZSTD_MAGIC):
        return (
            "is Zstandard-compressed, which rollgym cannot read (it reads plain, gzip, bzip2 "
            "and xz files): decompress it first (zstd -d)"
        )
    return None


def _open(path: Path | str) -> io.BufferedIOBase:
    head = _first_bytes(path)
    if head.startswith(GZIP_MAGIC):
        return gzip.open(path, "rb")
    if head.startswith(BZIP2_MAGIC):
        return bz2.open(path, "rb")
    if head.startswith(XZ_MAGIC):
        return lzma.open(path, "rb")
    return open(path, "rb")


def input_lines(path: Path | str) -> Iterator[bytes]:
    """The lines of the rows file at ``path``, decompressed if it is compressed.

    A file that cannot be read part way (a compressed stream cut short or corrupt, a failing
    disk) ends the rows with :class:`~rollgym.errors.InputError` naming the last line read:
    the rows before it are read, the rest never are."""
    line = 0
    with _open(path) as handle:
        try:
            for raw in handle:
                line += 1
                yield raw
        except _UNREADABLE as exc:
            plain = isinstance(handle, io.BufferedReader)
            reason = "the input cannot be read" if plain else "the compressed input is damaged"
            raise InputError(
                f"{reason} after this line ({exc}); the rows after it cannot be read",
                path=str(path),
                line=line,
            ) from None
