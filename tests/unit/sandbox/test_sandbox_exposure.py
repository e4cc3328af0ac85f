"""Nothing of the server is visible from inside a real sandbox: canary secrets in the server's
environment appear in no process's environment or command line a command can read, no host
path is on those command lines, and no file descriptor of the server is inherited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_support import requires_sandbox

from rollgym.sandbox import SandboxPool

pytestmark = requires_sandbox

CANARIES = {
    "OPENAI_API_KEY": "canary-openai-7f3a",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer canary-otel-91c2",
    "_ROLLGYM_SERVER_SPEC": '{"name": "canary-spec-55d0"}',
    "ROLLGYM_CANARY_TOKEN": "canary-rollgym-0b7e",
}

#: The variables a command gets (docs/sandbox.md lists them; bwrap adds PWD=/work).
ALLOWED = {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "_ROLLGYM_SANDBOX_ID",
           "_ROLLGYM_SANDBOX_EXEC", "PWD"}  # fmt: skip

#: Reads, from inside, what every visible process carries. It names no canary itself.
INSPECT = r"""
import json, os
seen = {"env": dict(os.environ), "procs": {}}
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    entry = {}
    for part in ("environ", "cmdline"):
        try:
            entry[part] = open(f"/proc/{pid}/{part}", "rb").read().decode(errors="replace")
        except OSError as exc:
            entry[part] = f"unreadable: {exc.strerror}"
    try:
        entry["fds"] = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        entry["fds"] = {}
    status = open(f"/proc/{pid}/status").read()
    entry["ppid"] = int(status.split("PPid:")[1].split()[0])
    seen["procs"][pid] = entry
print(json.dumps(seen))
"""


@pytest.fixture
def canaries(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    return CANARIES


async def test_no_visible_process_carries_a_server_secret(
    pool: SandboxPool, canaries: dict[str, str], tmp_path: Path
) -> None:
    sandbox = await pool.acquire("r-canary")
    result = await sandbox.exec(["python3", "-c", INSPECT])
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    procs = seen["procs"]
    # bwrap's own process is PID 1 and readable: the leak was there
    assert "bwrap" in procs["1"]["cmdline"] and not procs["1"]["environ"].startswith("unread")
    dump = json.dumps(seen)
    for name, value in canaries.items():
        assert value not in dump and "canary-" not in dump, f"{name} is visible in the sandbox"
    assert "_ROLLGYM_SERVER_SPEC" not in dump and "OTEL_" not in dump
    # bwrap's processes start from the launch allow-list alone
    assert procs["1"]["environ"] == "PATH=/usr/local/bin:/usr/bin:/bin\0"
    for entry in procs.values():  # the command's: only the sandbox's own variables
        variables = dict(line.split("=", 1) for line in entry["environ"].split("\0") if line)
        assert set(variables) <= ALLOWED, variables
        assert variables.get("PWD", "/work") == "/work"  # the sandbox's, never the server's
        # no host path on a command line: bwrap's options came through a pipe
        assert str(sandbox.work_dir) not in entry["cmdline"]
        assert "--bind" not in entry["cmdline"] and "--setenv" not in entry["cmdline"]
        # every process's parent is inside the namespace (PID 1's is the invisible 0)
        assert entry["ppid"] == 0 or str(entry["ppid"]) in procs
        # no descriptor of the server: stdio pipes, /dev/null, bwrap's eventfd, the listing
        for target in entry["fds"].values():
            assert target.startswith(("pipe:", "anon_inode:", "/dev/null", "/proc/")), target
    assert set(seen["env"]) == ALLOWED and seen["env"]["PWD"] == "/work"


async def test_the_server_directory_and_its_files_are_not_reachable(
    pool: SandboxPool, canaries: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "server.yaml").write_text("api_key: canary-file-3e1d\n")
    monkeypatch.chdir(tmp_path)  # the server's working directory
    sandbox = await pool.acquire("r-cwd")
    probe = "cat /proc/1/cwd/server.yaml; ls /proc/1/cwd /proc/1/root; grep -rs canary- /work /tmp"
    result = await sandbox.exec(probe)
    assert "canary-file" not in result.stdout + result.stderr
    assert "server.yaml" not in result.stdout
