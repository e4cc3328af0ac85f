"""The one way rollgym replaces a small file: readers never see half of it, failures leave
no trace.

``summary.json``, ``progress.json``, ready files and span counts are all written whole to a
temporary sibling and renamed over the target. On failure (a full disk) the temporary file
is removed and the target is left as it was, so a full disk never leaves ``*.tmp`` behind.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through ``path.tmp`` + rename; create the parent folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
