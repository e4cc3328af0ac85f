"""Output records and the resume ledger.

``rollouts.jsonl`` and ``failures.jsonl`` are append-only. Each record is one ``write()`` of one
orjson line on an unbuffered file, so ``kill -9`` loses nothing that finished: at worst the last
line is torn, and the ledger truncates it away on the next start.

On resume the ledger streams both files (never loads them), marks each finished rollout in a
bit-packed bitmap indexed by ``task_index * repeats + rollout_index`` (300,000 rows x 8 repeats
is 300 KB), feeds every record to the summary so totals span sessions, and rewrites
``failures.jsonl`` without the records that must run again (``cancelled``, or every failure
with ``run.retry_failed``), atomically (temp file + ``os.replace``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import orjson

from rollgym.driver.outcomes import Outcome, RolloutResult
from rollgym.errors import OutputError

ROLLOUTS = "rollouts.jsonl"
FAILURES = "failures.jsonl"
_log = logging.getLogger(__name__)


class Bitmap:
    """A growable bit set over small non-negative integers."""

    __slots__ = ("_bits",)

    def __init__(self) -> None:
        self._bits = bytearray()

    def add(self, index: int) -> None:
        byte = index >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        self._bits[byte] |= 1 << (index & 7)

    def __contains__(self, index: int) -> bool:
        byte = index >> 3
        return byte < len(self._bits) and bool(self._bits[byte] >> (index & 7) & 1)

    @property
    def nbytes(self) -> int:
        return len(self._bits)


class OutcomeWriter:
    """Appends records to ``rollouts.jsonl`` / ``failures.jsonl``, one flushed line each.

    A write that fails (a full disk) or writes only part of its line is undone (the file is
    truncated back to its last whole line) and raises :class:`~rollgym.errors.OutputError`;
    from then on the writer is *broken* and refuses every record, so nothing after the gap is
    written either: the files hold exactly the records before it, and a resume runs the rest.
    """

    def __init__(self, output_dir: Path) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        self._rollouts = open(output_dir / ROLLOUTS, "ab", buffering=0)  # noqa: SIM115 - lives as long as the writer
        self._failures = open(output_dir / FAILURES, "ab", buffering=0)  # noqa: SIM115
        self._ends = {self._rollouts: self._rollouts.tell(), self._failures: self._failures.tell()}
        #: The first write error; set, every later record is refused (and not recorded).
        self.broken: OutputError | None = None

    def write(self, outcome: Outcome) -> None:
        """Record one outcome, or raise :class:`OutputError` (the record is not recorded)."""
        if self.broken is not None:
            raise self.broken
        line = orjson.dumps(outcome.to_record(), option=orjson.OPT_APPEND_NEWLINE)
        out = self._rollouts if isinstance(outcome, RolloutResult) else self._failures
        written = 0
        try:
            while written < len(line):  # a short write (a filling disk) goes on, or raises why
                count = out.write(line[written:])
                if not count:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += count
        except OSError as exc:
            self._undo(out, OutputError(out.name, exc))
        self._ends[out] += written

    def _undo(self, out: Any, error: OutputError) -> NoReturn:
        """Cut a partial line off (truncating frees space, so this works on a full disk)."""
        with contextlib.suppress(OSError):
            os.ftruncate(out.fileno(), self._ends[out])
        self.broken = error
        raise error

    def close(self) -> None:
        self._rollouts.close()
        self._failures.close()

    def __enter__(self) -> OutcomeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _records(path: Path) -> Iterator[dict[str, Any]]:
    """Stream a JSONL output file; truncate a torn last line (``kill -9`` mid-write)."""
    if not path.exists():
        return
    good_end = 0
    torn = False
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                torn = True
                break
            good_end += len(raw)
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                _log.warning(
                    "%s: skipping an unreadable line at byte %d", path, good_end - len(raw)
                )
                continue
            if isinstance(record, dict):
                yield record
    if torn:
        _log.warning("%s: truncating a torn last line left by an interrupted write", path)
        os.truncate(path, good_end)


class Ledger:
    """What earlier sessions finished, so a resume runs only the rest, exactly once."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self.done = Bitmap()
        self.resumed = 0

    def skip(self, task_index: int, rollout_index: int) -> bool:
        """True when this rollout already has a record (the hot-path check of a resume)."""
        return task_index * self.repeats + rollout_index in self.done

    def _mark(self, record: dict[str, Any]) -> bool:
        task_index = record.get("task_index")
        rollout_index = record.get("rollout_index")
        if not isinstance(task_index, int):
            return False
        if rollout_index is None:  # an unreadable input line: keyed by rollout index 0
            rollout_index = 0
        if not isinstance(rollout_index, int) or not 0 <= rollout_index < self.repeats:
            return False
        key = task_index * self.repeats + rollout_index
        if key in self.done:
            return False  # a duplicate can only come from a hand-edited file: count it once
        self.done.add(key)
        self.resumed += 1
        return True

    @classmethod
    def load(
        cls,
        output_dir: Path,
        repeats: int,
        *,
        retry_failed: bool,
        feed: Callable[[dict[str, Any], bool], None],
    ) -> Ledger:
        """Read earlier records; ``feed(record, is_result)`` gets each one that still counts."""
        ledger = cls(repeats)
        for record in _records(output_dir / ROLLOUTS):
            if ledger._mark(record):
                feed(record, True)
        failures = output_dir / FAILURES
        if not failures.exists():
            return ledger
        kept = failures.with_name(FAILURES + ".tmp")
        dropped = 0
        with open(kept, "wb") as out:
            for record in _records(failures):
                if retry_failed or record.get("error_kind") == "cancelled":
                    dropped += 1
                    continue
                if ledger._mark(record):
                    feed(record, False)
                    out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            out.flush()
            os.fsync(out.fileno())
        if dropped:
            os.replace(kept, failures)
        else:
            kept.unlink()
        return ledger
