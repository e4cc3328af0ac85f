"""``run.placement: ray`` on a real two-node Ray cluster on this machine.

Two raylets (``ray start --head`` and a second ``ray start --address=...``), both with
``--node-ip-address=127.0.0.1`` so nothing leaves loopback, each started in its own process
group and stopped by killing that group (never ``ray stop``, which would end every Ray
process on the machine). Each node offers one ``slot``; replicas asking for a slot each can
only start on different nodes, so a job that starts at all has replicas on both nodes.
Skipped when the ``ray`` extra is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

ray = pytest.importorskip("ray")

from e2e_support import killed_if_left_running, pythonpath, traces_check, wait_for  # noqa: E402

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RAY_CLI = shutil.which("ray")
#: Token authentication (on by default in recent Ray) is for clusters across machines; this
#: one never leaves loopback, and every process here must agree on the mode.
RAY_ENV = {"RAY_AUTH_MODE": "disabled"}


def _own_env() -> dict[str, str]:
    """This process's environment without ``RAY_ADDRESS``: every Ray process here talks to
    the cluster this test started, by its explicit address, never to one a shell points at."""
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """Two raylets on loopback; each node in its own process group."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def start_node(self, name: str, *args: str) -> None:
        command = [
            str(RAY_CLI),
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            '--resources={"solver_slot": 1, "arith_slot": 1, "policy_slot": 1}',
            "--disable-usage-stats",
            *args,
        ]
        with (self.root / f"{name}.log").open("ab") as log:
            self.nodes[name] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**_own_env(), **RAY_ENV},
            )

    def alive_nodes(self) -> int:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import ray; ray.init(address={self.address!r}, log_to_driver=False); "
                "print(sum(n['Alive'] for n in ray.nodes()))",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**_own_env(), **RAY_ENV},
        )
        lines = probe.stdout.strip().splitlines()
        return int(lines[-1]) if probe.returncode == 0 and lines else 0

    def kill(self, name: str) -> None:
        """Kill one node: its whole process group (its raylet and every worker under it)."""
        process = self.nodes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        for name in list(self.nodes):
            self.kill(name)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if RAY_CLI is None:
        pytest.skip("the ray command line is not installed")
    root = Path(tempfile.mkdtemp(prefix="rgray", dir="/tmp"))  # short: Ray's socket paths
    cluster = Cluster(root)
    try:
        cluster.start_node(
            "head",
            "--head",
            f"--port={cluster.port}",
            "--include-dashboard=false",
            f"--temp-dir={root / 'ray'}",
        )
        cluster.start_node("worker", f"--address={cluster.address}")
        assert wait_for(lambda: cluster.alive_nodes() == 2, timeout=180, interval=1.0), (
            root / "head.log"
        ).read_text() + (root / "worker.log").read_text()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _command(tmp_path: Path, cluster: Cluster, rows: int, *overrides: str) -> list[str]:
    lines = (REPO / "examples" / "quickstart.jsonl").read_text().splitlines()
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines[0:rows]) + "\n")
    return [
        sys.executable,
        "-m",
        "rollgym",
        "run",
        str(REPO / "examples" / "quickstart.yaml"),
        f"run.input={path}",
        f"run.output_dir={tmp_path / 'out'}",
        "run.placement=ray",
        f"run.ray_address={cluster.address}",
        "run.concurrency=16",
        "run.max_attempts=5",
        "telemetry.flush_timeout_s=5",
        # two replicas of the agent and its environment, one slot each: one per node
        "servers.solver.replicas=2",
        "servers.solver.ray.resources.solver_slot=1",
        "servers.arith.replicas=2",
        "servers.arith.ray.resources.arith_slot=1",
        *overrides,
    ]


def _env() -> dict[str, str]:
    env = {k: v for k, v in _own_env().items() if not k.startswith("OTEL_")}
    return {**env, **RAY_ENV, "PYTHONPATH": pythonpath()}


def test_replicas_land_on_both_nodes_and_traces_check(tmp_path: Path, cluster: Cluster) -> None:
    proc = subprocess.run(
        _command(tmp_path, cluster, 20), env=_env(), capture_output=True, text=True, timeout=600
    )
    out = tmp_path / "out"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["requested"], summary["completed"], summary["failed"]) == (60, 60, 0)
    # both replicas of the environment served (each has its own aggregates)
    arith = summary["environments"]["arith"]
    assert arith["replicas"]["arith"]["seeded"] > 0
    assert arith["replicas"]["arith@1"]["seeded"] > 0
    assert (
        arith["seeded"]
        == arith["replicas"]["arith"]["seeded"] + arith["replicas"]["arith@1"]["seeded"]
    )
    check = traces_check(out, env=_env())
    assert check.returncode == 0, check.stdout + check.stderr


def test_killing_one_nodes_raylet_mid_run_loses_no_rollout(
    tmp_path: Path, cluster: Cluster
) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _command(
            tmp_path,
            cluster,
            50,
            # the model too gets a replica on each node: nothing the rows use lives on one only
            "servers.policy.replicas=2",
            "servers.policy.ray.resources.policy_slot=1",
            # long enough that rollouts are still in flight on the killed node once its
            # processes are gone (at 0.2 s an idle machine finished the run first)
            "servers.policy.latency.seconds=1.5",
            "telemetry.preset=off",
        ),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with killed_if_left_running(proc):
        rollouts = out / "rollouts.jsonl"
        assert wait_for(
            lambda: rollouts.exists() and rollouts.read_bytes().count(b"\n") >= 10, timeout=300
        )
        cluster.kill("worker")
        output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    summary = orjson.loads((out / "summary.json").read_bytes())
    # every rollout of the node that died was retried on the other one
    assert (summary["requested"], summary["completed"], summary["failed"]) == (150, 150, 0), output
    records = [orjson.loads(line) for line in rollouts.read_bytes().splitlines()]
    assert len({record["rollout_id"] for record in records}) == len(records) == 150
    # the kill hit rollouts in flight on that node: they succeeded on a later attempt
    assert any(record["attempt"] > 0 for record in records), output


def _serving_pids(log: Path) -> list[int]:
    """The pids a replica's actors announced in its log (``... Ray actor pid N ...``)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [int(pid) for pid in re.findall(r"serving at \S+ \(Ray actor pid (\d+),", text)]


@pytest.mark.parametrize("server", ["arith", "solver"])
def test_a_ray_replica_killed_mid_run_is_replaced(
    tmp_path: Path, cluster: Cluster, server: str
) -> None:
    """An environment replica, or an agent replica (its in-flight rollouts' model and
    environment spans lose their parents with it: ``traces check`` counts them under it)."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _command(tmp_path, cluster, 50, "servers.policy.latency.seconds=0.2"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = out / "logs" / f"{server}@1.log"
    with killed_if_left_running(proc):
        rollouts = out / "rollouts.jsonl"
        assert wait_for(
            lambda: rollouts.exists() and rollouts.read_bytes().count(b"\n") >= 10, timeout=300
        )
        [pid] = _serving_pids(log)
        os.kill(pid, signal.SIGKILL)  # the actor's worker process only: its node lives on
        output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    assert f"server '{server}@1' died (its Ray actor died (pid {pid}" in output
    restarted = f"server '{server}@1' is back at http://127.0.0.1:" in output
    # the replacement is started at once; the other replica may finish the whole run (its
    # retried sessions included) before the killed one is back
    assert restarted or f"restarting server '{server}@1'" in output, output
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["requested"], summary["completed"], summary["failed"]) == (150, 150, 0), output
    records = [orjson.loads(line) for line in rollouts.read_bytes().splitlines()]
    assert len({record["rollout_id"] for record in records}) == len(records) == 150
    # the kill hit sessions in flight on that replica: they succeeded on a later attempt
    assert any(record["attempt"] > 0 for record in records), output
    entry = summary["servers"][server]
    restarts = 1 if restarted else entry["replicas"][f"{server}@1"]["restarts"]
    assert entry["replicas"][f"{server}@1"] == {"deaths": 1, "restarts": restarts, "down": False}
    assert entry["replicas"][server] == {"deaths": 0, "restarts": 0, "down": False}
    assert (entry["deaths"], entry["down"]) == (1, False)
    if restarted:  # a new actor (a new process) took the replica's place
        pids = _serving_pids(log)
        assert len(pids) == 2 and pids[0] == pid and pids[1] != pid, log.read_text()
    check = traces_check(out, env=_env())
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"server processes that died mid-run: {server}@1 pid {pid}" in check.stdout
