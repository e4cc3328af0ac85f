"""Counted losses explain gaps only up to their count; a store file that is no database is
refused in one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.reading.counted_losses import CountedLosses
from rollgym.tracestore.store_process import UnusableStoreFile, check_store_file


def _losses(**lost: int) -> CountedLosses:
    return CountedLosses.of_sessions([{"spans_lost": lost}, {"ended": False}])


def test_gaps_within_the_counted_losses_are_explained() -> None:
    losses = _losses(spans_unknown=3)
    losses.add("missing_parent", "m", b"t1", {}, absent_span=b"p1")
    losses.add("missing_parent", "m", b"t1", {}, absent_span=b"p1")  # the same absent parent
    losses.add("isolation", "m", b"t2", {})
    losses.add("rollout_has_trace", "m", b"t3", {})
    assert losses.spans_missing_at_least() == 3
    assert losses.explained()
    assert losses.summary()["checks_excused"] == {
        "missing_parent": 2,
        "isolation": 1,
        "rollout_has_trace": 1,
    }


def test_more_gaps_than_counted_losses_are_not_explained() -> None:
    losses = _losses(spans_dropped=1)
    losses.add("missing_parent", "m", b"t1", {}, absent_span=b"p1")
    losses.add("missing_parent", "m", b"t1", {}, absent_span=b"p2")
    assert losses.spans_missing_at_least() == 2
    assert not losses.explained()
    assert not _losses().explained() or not _losses().candidates


def test_a_store_file_that_is_no_database_is_refused_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    check_store_file(db)  # absent: the store makes it
    db.write_bytes(b"")
    check_store_file(db)  # empty: SQLite makes a database of it
    db.write_bytes(b"SQLite format 3\x00" + bytes(100))
    check_store_file(db)
    db.write_bytes(b"not a database at all")
    with pytest.raises(UnusableStoreFile, match=f"{db} is not a SQLite database"):
        check_store_file(db)
