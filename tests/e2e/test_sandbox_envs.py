"""The code and terminal environments as real servers: abuse is the task's failure, never the
server's; the server keeps serving; no sandbox process outlives its rollout; the pool's
accounting is exact; a machine without bubblewrap fails at server start, naming the fix."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Job, agent, children_of, wait_for

from rollgym.builtins.envs.tasksets import load_taskset
from rollgym.builtins.models.sandbox_play import CODE_ABUSES, SHELL_ABUSES
from rollgym.config import validate_config
from rollgym.errors import LaunchError
from rollgym.http.client import HttpClient
from rollgym.placement.launcher import launch_servers
from rollgym.sandbox import unavailable_reason

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]
LIMITS = {"wall_s": 15, "cpu_s": 2, "memory_mb": 256, "processes": 32, "output_bytes": 65536}
FAST = {"kind": "fixed", "seconds": 0.001}


def sandbox_processes() -> list[int]:
    """Every live process started inside a sandbox of this test's servers (they carry the
    sandbox id variable); sandboxes of anything else running on the machine are not ours."""
    found = []
    for pid in children_of(os.getpid()):
        try:
            if b"_ROLLGYM_SANDBOX_ID=" in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def env_servers(**extra: Any) -> dict[str, Any]:
    common = {"limits": LIMITS, "warm_sandboxes": 2, **extra}
    return {
        "code": {"kind": "environment", "impl": "code", **common},
        "terminal": {"kind": "environment", "impl": "terminal", **common},
    }


async def _episode(
    client: HttpClient,
    url: str,
    name: str,
    task: dict[str, Any],
    tool: str,
    calls: list[dict[str, Any]],
    answer: str | None,
) -> tuple[dict[str, Any], list[str]]:
    seeded = await client.post_json(name, url + "/seed_session", {"rollout_id": "r", "task": task})
    assert seeded.status == 200, seeded.data
    session = seeded.data["session_id"]
    outputs = []
    for arguments in calls:
        reply = await client.post_json(
            name, f"{url}/tools/{tool}", {"session_id": session, "arguments": arguments}
        )
        assert reply.status == 200, reply.data
        outputs.append(reply.data["output"])
    verdict = await client.post_json(
        name, url + "/verify", {"session_id": session, "answer": answer}
    )
    assert verdict.status == 200, verdict.data
    return verdict.data, outputs


async def test_abuse_fails_the_task_and_the_servers_keep_serving(tmp_path: Path) -> None:
    config = validate_config(
        {"run": {"input": str(tmp_path / "rows.jsonl")}, "servers": env_servers()}
    )
    async with launch_servers(config, run_id="e2e", output_dir=tmp_path / "out", env={}) as urls:
        code_url, shell_url = urls["code"], urls["terminal"]
        port = int(code_url.rsplit(":", 1)[1])  # a loopback server of this very run
        abuses = {
            **CODE_ABUSES,
            "run_server": f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), 3)",
            "write_outside": "    open('/usr/lib/evil.py', 'w').write('x')",
        }
        async with HttpClient() as client:
            code_results = await asyncio.gather(*(
                _episode(
                    client, code_url, "code", {"problem": "gcd"}, "run_code",
                    [{"code": f"def gcd(*a):\n{body}\nprint(gcd(4, 6))"}],
                    f"```python\ndef gcd(*a):\n{body}\n```",
                )
                for body in abuses.values()
            ))  # fmt: skip
            shell_results = await asyncio.gather(*(
                _episode(client, shell_url, "terminal", {"task": "count_errors"}, "run_shell",
                         [{"command": command}], "Done.")
                for command in SHELL_ABUSES.values()
            ))  # fmt: skip
            task = load_taskset("terminal")["count_errors"]
            good, _ = await _episode(
                client, shell_url, "terminal", {"task": "count_errors"}, "run_shell",
                [{"command": c} for c in task["commands"]], "Done.",
            )  # fmt: skip
            code_metrics = (
                await client.post_json("code", code_url + "/aggregate_metrics", {})
            ).data
            shell_metrics = (
                await client.post_json("terminal", shell_url + "/aggregate_metrics", {})
            ).data
            health = await client.get_json("code", code_url + "/health")
        leftover = sandbox_processes()
    assert all(verdict["reward"] == 0.0 for verdict, _ in code_results)
    assert all(verdict["reward"] == 0.0 for verdict, _ in shell_results)
    assert good["reward"] == 1.0 and health.status == 200
    by_name = dict(zip(abuses, code_results, strict=True))
    assert "Permission denied" in by_name["read_secrets"][1][0]
    assert "ConnectionRefusedError" in by_name["run_server"][1][0]
    assert "Read-only file system" in by_name["write_outside"][1][0]
    assert "output limit" in by_name["output_flood"][1][0]
    assert "MemoryError" in by_name["unbounded_allocation"][1][0]
    assert "limit" in by_name["infinite_loop"][1][0]
    # exact accounting: one sandbox per episode, all destroyed but the warm ones; every exec
    # (one tool call + one verification per episode) counted once
    for metrics, episodes in ((code_metrics, len(abuses)), (shell_metrics, len(SHELL_ABUSES) + 1)):
        sandbox = metrics["sandbox"]
        assert sandbox["created"] - sandbox["destroyed"] == sandbox["live"]
        assert sandbox["destroyed"] == episodes
    assert code_metrics["sandbox"]["execs"] == 2 * len(abuses)
    assert shell_metrics["sandbox"]["execs"] == 2 * len(SHELL_ABUSES) + len(task["commands"]) + 1
    assert leftover == []


#: Canary secrets in the environment the terminal server is launched with.
CANARIES = {
    "OPENAI_API_KEY": "canary-openai-e2e-4d1f",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer canary-otel-e2e-a9b3",
    "ROLLGYM_CANARY_TOKEN": "canary-rollgym-e2e-77c0",
}
#: Counts, inside the sandbox, what of the server every visible process shows (the pattern
#: is written so that this program's own command line does not match it).
INSPECT = r"""
import os, re
found = re.compile(rb"[c]anary-|[R]OLLGYM_SERVER_SPEC|[O]TEL_EXPORTER")
pids = [p for p in os.listdir("/proc") if p.isdigit()]
hits = sum(len(found.findall(open(f"/proc/{p}/{part}", "rb").read()))
           for p in pids for part in ("environ", "cmdline"))
first = open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()
print(f"hits={hits} pids={len(pids)} pid1={os.path.basename(first)}")
"""


async def test_a_real_server_shows_its_sandboxes_no_secret_and_bounds_their_disk(
    tmp_path: Path,
) -> None:
    servers = env_servers()
    servers["terminal"]["limits"] = {**LIMITS, "disk_mb": 4}
    config = validate_config({"run": {"input": str(tmp_path / "rows.jsonl")}, "servers": servers})
    task = {"inline": {"id": "quota", "prompt": "write", "check": "test -s small"}}
    async with launch_servers(
        config, run_id="e2e", output_dir=tmp_path / "out", env=CANARIES
    ) as urls:
        url = urls["terminal"]
        async with HttpClient() as client:
            verdict, outputs = await _episode(
                client, url, "terminal", task, "run_shell",
                [
                    {"command": f"python3 -c '{INSPECT}'"},
                    {"command": "env"},
                    {"command": "dd if=/dev/zero of=small bs=1M count=1"},
                    {"command": "dd if=/dev/zero of=big bs=1M count=20"},
                ],
                "Done.",
            )  # fmt: skip
            metrics = (await client.post_json("terminal", url + "/aggregate_metrics", {})).data
    inspect, env, under, past = outputs
    assert "hits=0 " in inspect and "pid1=bwrap" in inspect, inspect
    for output in outputs:
        assert "canary-" not in output and "_ROLLGYM_SERVER_SPEC" not in output
    assert "OPENAI_API_KEY" not in env and "PATH=/usr/local/bin:/usr/bin:/bin" in env
    assert under.startswith("exit code 0") and "disk quota" not in under
    assert "disk quota reached" in past and "No space left on device" in past
    assert verdict["reward"] == 1.0 and metrics["sandbox"]["disk_limited"] == 1


async def test_an_abandoned_session_gives_its_sandbox_back(tmp_path: Path) -> None:
    servers = env_servers(session_ttl_s=1.0)
    config = validate_config({"run": {"input": str(tmp_path / "rows.jsonl")}, "servers": servers})
    async with launch_servers(config, run_id="e2e", output_dir=tmp_path / "out", env={}) as urls:
        url = urls["terminal"]
        async with HttpClient() as client:
            seeded = await client.post_json(
                "terminal", url + "/seed_session", {"task": {"task": "make_dirs"}}
            )
            session = seeded.data["session_id"]
            await client.post_json(
                "terminal", url + "/tools/run_shell",
                {"session_id": session, "arguments": {"command": "sleep 600 &"}},
            )  # fmt: skip

            async def destroyed() -> int:
                data = (await client.post_json("terminal", url + "/aggregate_metrics", {})).data
                return int(data["sandbox"]["destroyed"])

            for _ in range(300):
                if await destroyed() == 1:
                    break
                await asyncio.sleep(0.1)
            assert await destroyed() == 1
            gone = await client.post_json("terminal", url + "/verify", {"session_id": session})
    assert gone.status == 404
    assert sandbox_processes() == []


async def test_a_machine_without_bubblewrap_fails_at_server_start(tmp_path: Path) -> None:
    config = validate_config(
        {"run": {"input": str(tmp_path / "rows.jsonl")}, "servers": {"code": env_servers()["code"]}}
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    with pytest.raises(LaunchError) as caught:
        async with launch_servers(
            config, run_id="e2e", output_dir=tmp_path / "out", env={"PATH": str(empty)}
        ):
            pass
    log = (tmp_path / "out" / "logs" / "code.log").read_text()
    assert "apt-get install bubblewrap" in str(caught.value) + log


def test_the_example_job_runs_both_environments_with_failures_as_rewards(
    job: Job, no_leftover_servers: None
) -> None:
    code_rows = [{"agent": "coder", "problem": name} for name in list(load_taskset("code"))[:12]]
    shell_rows = [{"agent": "sheller", "task": name} for name in list(load_taskset("terminal"))[:8]]
    policy = {"kind": "model", "impl": "simulated", "accuracy": 0.3, "latency": FAST}
    job.write(
        {
            "policy": policy,
            **env_servers(),
            "coder": agent("tool_loop", model="policy", environment="code", max_turns=4),
            "sheller": agent("tool_loop", model="policy", environment="terminal", max_turns=8),
        },
        code_rows + shell_rows,
        repeats=2,
        concurrency=8,
        timeout_s=120,
        agent="coder",
    )
    done = job.run(timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = job.summary
    assert summary["requested"] == summary["completed"] == 40 and summary["failed"] == 0
    rewards = [row["reward"] for row in job.rollouts]
    assert 0.0 in rewards and 1.0 in rewards  # wrong and abusive attempts fail as rewards
    assert wait_for(lambda: sandbox_processes() == [], timeout=30)
