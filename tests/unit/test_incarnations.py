"""``servers.jsonl``: each process a replica had, its address and its death, read back in
order; and where the supervisor finds a local replica's address (its ready file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rollgym.incarnations import IncarnationLog, read_incarnations
from rollgym.placement.supervisor import address_of
from rollgym.servers.spec import ServeSpec


@dataclass
class _Replica:
    """A placed local replica as the supervisor sees it (it announced its port)."""

    spec: ServeSpec
    pid: int
    log_path: Path | None = None

    def exit_status(self) -> str | None:
        return None


def test_a_death_and_its_restart_are_two_incarnations(tmp_path: Path) -> None:
    log = IncarnationLog(tmp_path, session=2)
    log.started("a@1", 101, "127.0.0.1", 4000)
    log.started("a", 102, "127.0.0.1", 4001)
    log.died("a@1", 101, "killed by SIGKILL")
    log.started("a@1", 103, "127.0.0.1", 4000)
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


def test_a_local_replica_is_found_at_the_port_it_announced(tmp_path: Path) -> None:
    ready = tmp_path / "a@1.ready"
    ready.write_text("4000")
    replica = _Replica(ServeSpec("a", "agent", "x", str(ready), replica=1), 101)
    assert address_of(replica) == ("127.0.0.1", 4000)  # type: ignore[arg-type]
    ready.unlink()
    assert address_of(replica) == (None, None)  # type: ignore[arg-type]
