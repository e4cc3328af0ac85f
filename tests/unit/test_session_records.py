"""sessions.jsonl's reader: killed sessions' byte ranges, offsets read defensively."""

from __future__ import annotations

from pathlib import Path

import orjson

from rollgym.session_records import SESSIONS, killed_ranges, read_sessions


def _write(run_dir: Path, *records: dict[str, object]) -> None:
    lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
    (run_dir / SESSIONS).write_bytes(lines)


def test_a_killed_session_owns_the_bytes_up_to_the_next_start(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"event": "start", "session": "a", "offsets": {"rollouts.jsonl": 0}},
        {"event": "start", "session": "b", "offsets": {"rollouts.jsonl": 120}},
        {"event": "end", "session": "b", "status": "completed"},
    )
    sessions = read_sessions(tmp_path)
    assert [(s["index"], s["status"]) for s in sessions] == [(0, "killed"), (1, "completed")]
    assert killed_ranges(sessions, "rollouts.jsonl") == [(0, 120)]


def test_offsets_missing_or_not_a_map_count_as_zero(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"event": "start", "session": "a"},
        {"event": "start", "session": "b", "offsets": "junk"},
    )
    sessions = read_sessions(tmp_path)
    assert killed_ranges(sessions, "rollouts.jsonl") == [(0, 0), (0, 1 << 62)]
