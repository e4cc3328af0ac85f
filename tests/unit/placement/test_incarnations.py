"""``servers.jsonl``: each process a replica had, its address and its death, read back in order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rollgym.placement.incarnations import IncarnationLog, read_incarnations
from rollgym.servers.spec import ServeSpec


@dataclass
class _Replica:
    """A placed replica as the supervisor sees it (a local process announces its port)."""

    spec: ServeSpec
    pid: int
    log_path: Path | None = None

    def exit_status(self) -> str | None:
        return None


def _replica(tmp_path: Path, pid: int, port: int) -> _Replica:
    ready = tmp_path / f"{pid}.ready"
    ready.write_text(str(port))
    return _Replica(ServeSpec("a", "agent", "x", str(ready), replica=1), pid)


def test_a_death_and_its_restart_are_two_incarnations(tmp_path: Path) -> None:
    log = IncarnationLog(tmp_path, session=2)
    first = _replica(tmp_path, 101, 4000)
    log.started("a@1", first)  # type: ignore[arg-type]
    log.started("a", _replica(tmp_path, 102, 4001))  # type: ignore[arg-type]
    log.died("a@1", first, "killed by SIGKILL")  # type: ignore[arg-type]
    log.started("a@1", _replica(tmp_path, 103, 4000))  # type: ignore[arg-type]
    with (tmp_path / "servers.jsonl").open("ab") as out:
        out.write(b'{"event": "start", "instance"')  # a torn last line (killed driver)
    got = read_incarnations(tmp_path)
    assert [(i.instance, i.pid, i.port, i.exit, i.session) for i in got] == [
        ("a@1", 101, 4000, "killed by SIGKILL", 2),
        ("a", 102, 4001, None, 2),
        ("a@1", 103, 4000, None, 2),
    ]
    assert got[0].died_at is not None and got[0].died_at >= got[0].started_at
    assert got[0].host == "127.0.0.1" and got[0].label == "a@1 pid 101"
    assert got[2].died_at is None


def test_no_file_is_no_history(tmp_path: Path) -> None:
    assert read_incarnations(tmp_path) == []
