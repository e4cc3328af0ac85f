"""The store's schema version: a new file says it, an older file is migrated, a newer refused.

``fixtures/store_v0/`` is a store written by rollgym before schema versions (a 10-rollout
synthetic run through the real receiver, by the code of that time, then VACUUMed): the
migration is tested on a file that code really wrote, not on one rebuilt here.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rollgym.cli import traces as traces_cli
from rollgym.reading import queries
from rollgym.reading.check import check_run
from rollgym.tracestore.schema import (
    DISPATCH_COLUMNS,
    LINK_COLUMNS,
    RESOURCE_COLUMNS,
    SCHEMA_VERSION,
    SPAN_COLUMNS,
    StoreVersionError,
)
from rollgym.tracestore.store import TraceStore, connect_readonly

V0 = Path(__file__).parent / "fixtures" / "store_v0"


def _copy_v0(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(V0, run_dir)
    return run_dir


def _version(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _meta(db: Path) -> dict[str, str]:
    with closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT key, value FROM store_meta").fetchall())


def _everything(db: Path) -> dict[str, list[tuple]]:
    with closing(sqlite3.connect(db)) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("resources", "spans", "links", "dispatches")
        }


def test_a_new_store_says_its_version(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    assert _version(db) == SCHEMA_VERSION >= 1
    meta = _meta(db)
    assert meta["created_by"].startswith("rollgym") and "created_at" in meta
    TraceStore(db).close()  # reopening changes nothing
    assert _meta(db) == meta


def test_a_store_from_before_versions_is_migrated_with_nothing_lost(tmp_path: Path) -> None:
    run_dir = _copy_v0(tmp_path)
    db = run_dir / "traces.db"
    assert _version(db) == 0
    before = _everything(db)
    with connect_readonly(db) as conn:  # an older file is readable as it is
        listed_before = queries.list_rollouts(conn, limit=100)
    TraceStore(db).close()
    assert _version(db) == SCHEMA_VERSION
    meta = _meta(db)
    assert meta["created_by"] == "rollgym before schema versions"
    assert meta["migrated_by"].startswith("rollgym")
    assert _everything(db) == before
    with connect_readonly(db) as conn:
        assert queries.list_rollouts(conn, limit=100) == listed_before
        report = check_run(run_dir, conn)
    assert report.ok, report.violations
    assert listed_before["total"] == 10 + 2  # two retried rollouts in the synthetic run


def test_columns_are_named_in_the_order_rows_are_built(tmp_path: Path) -> None:
    """The decoders build positional tuples; the named INSERTs must list the same order."""
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    with closing(sqlite3.connect(db)) as conn:
        for table, columns in (
            ("spans", SPAN_COLUMNS),
            ("links", LINK_COLUMNS),
            ("resources", RESOURCE_COLUMNS),
            ("dispatches", DISPATCH_COLUMNS),
        ):
            declared = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))
            assert declared == columns, table


def test_a_store_from_a_newer_rollgym_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _copy_v0(tmp_path)
    db = run_dir / "traces.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = db.read_bytes()
    with pytest.raises(StoreVersionError, match="written by a newer rollgym"):
        TraceStore(db)
    with pytest.raises(StoreVersionError, match=f"reads up to {SCHEMA_VERSION}"):
        connect_readonly(db)
    assert db.read_bytes() == before, "a refused store must be left as it was"
    assert traces_cli.main(["ls", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "written by a newer rollgym" in err
