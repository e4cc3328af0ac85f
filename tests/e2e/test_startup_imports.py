"""What each process of ``rollgym serve`` imports by the time every server is healthy.

The quickstart's servers and the driver speak plain ``http://`` on loopback (the lean client),
so none of them may import aiohttp, and no server imports the websockets package (no server
speaks WebSocket); the trace store, an aiohttp app, does. A process's modules are read from
outside through ``/proc/<pid>/maps``: aiohttp, its multidict and websockets each load a
compiled extension when imported, so a mapped ``aiohttp/`` file means aiohttp was imported.
The store waits for the servers before it imports anything, and then does import aiohttp.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from e2e_support import Job, children_of, server_pids_alive, wait_for

from server_specs import quickstart_servers

pytestmark = pytest.mark.e2e

SERVERS = quickstart_servers()


def mapped_packages(pid: int) -> set[str]:
    """The site-packages folders whose files ``pid`` has mapped (its imported extensions)."""
    found = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1]
        if "-packages/" in path:
            found.add(path.split("-packages/", 1)[1].split("/", 1)[0])
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.parametrize("telemetry", ["default", "off"])
def test_no_process_but_the_store_imports_aiohttp_or_websockets(
    job: Job, no_leftover_servers: None, telemetry: str
) -> None:
    job.write(SERVERS, [], telemetry={"preset": telemetry})
    proc = job.serve(telemetry=True)
    try:
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().split() for _ in SERVERS)
        assert sorted(urls) == sorted(SERVERS)
        forked = server_pids_alive(under=str(job.root))  # the servers and their span shippers
        servers = [pid for pid in forked if parent_of(pid) == proc.pid]
        assert len(servers) == len(SERVERS)
        for pid in [proc.pid, *forked]:
            imported = mapped_packages(pid)
            assert "aiohttp" not in imported, (cmdline(pid), sorted(imported))
            assert "multidict" not in imported, (cmdline(pid), sorted(imported))
        for pid in forked:
            assert "websockets" not in mapped_packages(pid), cmdline(pid)
        stores = [pid for pid in children_of(proc.pid) if "rollgym.cli.traces" in cmdline(pid)]
        if telemetry == "default":
            # started beside the fork server, it waits to import until the servers are up
            # (rollgym/start_gate.py), then imports aiohttp: the check sees it where it is
            assert len(stores) == 1 and "rollgym.start_gate" in cmdline(stores[0])
            assert wait_for(lambda: "aiohttp" in mapped_packages(stores[0]), timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=30)
