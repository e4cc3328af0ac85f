"""Output records and the resume ledger.

``rollouts.jsonl`` and ``failures.jsonl`` are append-only. Each record is one ``write()`` of one
orjson line on an unbuffered file, so ``kill -9`` loses nothing that finished: at worst the last
line is torn, and the ledger truncates it away on the next start.

On resume the ledger streams both files (never loads them), marks each finished rollout in a
bit-packed bitmap indexed by ``task_index * repeats + rollout_index`` (300,000 rows x 8 repeats
is 300 KB), feeds every record to the summary so totals span sessions, and rewrites
``failures.jsonl`` without the records that must run again (``cancelled``, or every failure
with ``run.retry_failed``), atomically (temp file + ``os.replace``).

A rollout's trajectory is written to ``trajectories.jsonl`` just before its rollout line,
which points at it (``{"file", "offset", "bytes"}``). The rollout line is the commit: a
``kill -9`` between the two leaves a trajectory line with no rollout line, always at the end
of the file, and the ledger cuts it off on resume, so each finished rollout has exactly one
trajectory line and every pointer stays valid.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import orjson

from rollgym.driver.outcomes import Outcome, RolloutResult
from rollgym.errors import OutputError

ROLLOUTS = "rollouts.jsonl"
FAILURES = "failures.jsonl"
TRAJECTORIES = "trajectories.jsonl"
_log = logging.getLogger(__name__)
#: The identity of a trajectory line, as :meth:`RolloutResult.trajectory_record` writes it.
_NEWLINE = orjson.OPT_APPEND_NEWLINE
_IDENTITY = re.compile(rb',"task_index":(\d+),"rollout_index":(\d+),')


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

    def __init__(self, output_dir: Path, session: int | None = None) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        self._dir = output_dir
        #: The run session writing (``session`` in each line: which dispatch made it).
        self._session = session
        self._rollouts = open(output_dir / ROLLOUTS, "ab", buffering=0)  # noqa: SIM115 - lives as long as the writer
        self._failures = open(output_dir / FAILURES, "ab", buffering=0)  # noqa: SIM115
        self._trajectories: Any = None  # opened with the first trajectory
        self._ends = {self._rollouts: self._rollouts.tell(), self._failures: self._failures.tell()}
        #: The first write error; set, every later record is refused (and not recorded).
        self.broken: OutputError | None = None

    def write(self, outcome: Outcome) -> None:
        """Record one outcome, or raise :class:`OutputError` (the record is not recorded)."""
        if self.broken is not None:
            raise self.broken
        if not isinstance(outcome, RolloutResult):
            record = outcome.to_record()
            log = self._log_of(outcome.dispatch_name) if outcome.frames else None
            if log is not None:  # where the whole traceback is
                record["log"] = log
            self._append(self._failures, self._line(record))
            return
        pointer = self._write_trajectory(outcome) if outcome.trajectory is not None else None
        self._append(self._rollouts, self._line(outcome.to_record(pointer)))

    def _line(self, record: dict[str, Any]) -> bytes:
        if self._session is not None:
            record["session"] = self._session
        return orjson.dumps(record, option=_NEWLINE)

    def _log_of(self, server: str | None) -> str | None:
        """The log, relative to the run, where server ``server`` wrote a failure's whole
        traceback: ``logs/<server>.log``, or its replicas' ``logs/<server>@<i>.log``; None
        for a server this run did not launch (``url:``: its log is its own)."""
        logs = self._dir / "logs"
        if server is None or "/" in server:
            return None
        if (logs / f"{server}.log").exists():
            return f"logs/{server}.log"
        if any(logs.glob(f"{glob.escape(server)}@*.log")):
            return f"logs/{server}@<replica>.log (one per replica)"
        return None

    def _write_trajectory(self, outcome: RolloutResult) -> dict[str, object]:
        """Append the trajectory line; return the rollout line's pointer to it."""
        if self._trajectories is None:
            self._trajectories = open(self._dir / TRAJECTORIES, "ab", buffering=0)  # noqa: SIM115
            self._ends[self._trajectories] = os.fstat(self._trajectories.fileno()).st_size
        line = orjson.dumps(outcome.trajectory_record(), option=_NEWLINE)
        offset = self._ends[self._trajectories]
        self._append(self._trajectories, line)
        return {"file": TRAJECTORIES, "offset": offset, "bytes": len(line)}

    def _append(self, out: Any, line: bytes) -> None:
        """Write all of ``line`` to ``out``, or undo the part written and raise why."""
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
        if self._trajectories is not None:
            self._trajectories.close()

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

    def _mark(self, record: Mapping[str, object]) -> bool:
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

    def _trim_trajectories(self, path: Path) -> None:
        """Drop trajectory lines whose rollout line was never written (``kill -9`` between the
        two writes) or that repeat one already kept: cut off at the end, where they are."""
        if not path.exists():
            return
        kept = Bitmap()
        first_orphan: int | None = None
        orphan_inside = False
        offset = 0
        with open(path, "rb") as handle:
            for raw in handle:
                start, offset = offset, offset + len(raw)
                key = self._key_of_line(raw) if raw.endswith(b"\n") else None
                if key is None or key not in self.done or key in kept:
                    first_orphan = start if first_orphan is None else first_orphan
                    continue
                kept.add(key)
                orphan_inside = orphan_inside or first_orphan is not None
        if orphan_inside:  # only a hand-edited file gets here; pointers past it go stale
            _log.warning("%s: trajectory lines without a rollout line in the middle", path)
        elif first_orphan is not None:
            _log.warning("%s: cutting %d bytes of unfinished rollouts", path, offset - first_orphan)
            os.truncate(path, first_orphan)

    def _key_of_line(self, raw: bytes) -> int | None:
        """The ledger key of a trajectory line, read from its identity fields at the start of
        the line (a trajectory is kilobytes; its identity a few dozen bytes). Inside a JSON
        string a quote is escaped, so the pattern can only match the fields themselves."""
        found = _IDENTITY.search(raw, 0, 4096)
        if found is None:
            return None
        task_index, rollout_index = int(found[1]), int(found[2])
        if rollout_index >= self.repeats:
            return None
        return task_index * self.repeats + rollout_index

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
        ledger._trim_trajectories(output_dir / TRAJECTORIES)
        failures = output_dir / FAILURES
        if not failures.exists():
            return ledger
        kept = failures.with_name(FAILURES + ".tmp")
        dropped = 0
        try:
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
        finally:
            kept.unlink(missing_ok=True)  # replaced, not needed, or a read that failed
        return ledger
