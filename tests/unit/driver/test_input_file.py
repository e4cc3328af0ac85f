"""A rows input compressed with gzip, bzip2 or xz reads as the same rows as the plain file."""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path

import pytest

from rollgym.driver.input_file import ZSTD_MAGIC, input_lines
from rollgym.driver.job import input_problem
from rollgym.driver.progress import count_rows
from rollgym.driver.rows import Router, TaskRow, read_jsonl
from rollgym.errors import InputError

ROUTER = Router(agents={"solver"}, environment_routes={}, default_agent="solver")
ROWS = b"".join(b'{"q": %d}\n' % i for i in range(500)) + b"\n" + b'{"q": "last"}\n'


@pytest.mark.parametrize(
    ("name", "compress"),
    [("rows.jsonl.gz", gzip.compress), ("rows.bz2", bz2.compress), ("renamed.txt", lzma.compress)],
)
def test_compressed_rows_read_as_the_plain_files(
    tmp_path: Path, name: str, compress: Callable[[bytes], bytes]
) -> None:
    """Told by the first bytes, not the name; the same rows, task indices and lines."""
    plain, packed = tmp_path / "rows.jsonl", tmp_path / name
    plain.write_bytes(ROWS)
    packed.write_bytes(compress(ROWS))
    assert list(input_lines(packed)) == list(input_lines(plain)) == ROWS.splitlines(keepends=True)
    read = [(e.task_index, e.line, e.row) for e in read_jsonl(packed, ROUTER)]
    assert read == [(e.task_index, e.line, e.row) for e in read_jsonl(plain, ROUTER)]
    assert all(isinstance(e, TaskRow) for e in read_jsonl(packed, ROUTER))
    assert count_rows(packed) == count_rows(plain) == 501
    assert input_problem(packed) is None


def test_a_damaged_compressed_input_names_the_line_it_broke_after(tmp_path: Path) -> None:
    """A download cut short: the rows before the break are read, then one error."""
    packed = gzip.compress(ROWS * 20)
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    read = []
    with pytest.raises(InputError) as broken:
        for entry in read_jsonl(path, ROUTER):
            read.append(entry)
    assert read and broken.value.line >= len(read)
    assert "compressed input is damaged after this line" in str(broken.value)
    assert str(broken.value).startswith(f"{path}:{broken.value.line}: ")
    with pytest.raises(InputError):
        count_rows(path)


def test_a_zstandard_input_is_refused_before_the_run_saying_how_to_read_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(ZSTD_MAGIC + bytes(32))
    problem = input_problem(path)
    assert problem is not None and "Zstandard" in problem and "zstd -d" in problem
