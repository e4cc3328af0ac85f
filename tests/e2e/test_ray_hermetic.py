"""The Ray tests never attach to a Ray cluster they did not start.

On a machine where some other Ray cluster runs (and ``RAY_ADDRESS`` names it, as in a shell
set up for that cluster), ``ray.init()`` joins it ("Connecting to existing Ray cluster at
address ..."). This test starts such an unrelated cluster itself (``ray start --head`` on its
own free port and temp dir, in its own process group, stopped by that group's id), checks
that a plain ``ray.init()`` would indeed join it (so the setup is real), then that the two
ways the Ray tests and rollgym start Ray (``RAY_INIT`` of ``test_ray_placement.py``, and
``RayPlacement.connect(None)`` of ``run.placement: ray``) each get a cluster of their own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from e2e_support import pythonpath, wait_for  # noqa: E402
from test_ray_multinode import RAY_ENV, _free_port  # noqa: E402
from test_ray_placement import RAY_INIT  # noqa: E402

pytestmark = pytest.mark.e2e

RAY_CLI = shutil.which("ray")

_GCS = "import ray; print('GCS', ray.get_runtime_context().gcs_address, flush=True); "
PROBES = {
    "plain ray.init()": "import ray; ray.init(log_to_driver=False); " + _GCS,
    "the tests' RAY_INIT": f"import ray; ray.init(**{RAY_INIT!r}); " + _GCS,
    "RayPlacement.connect(None)": (
        "from rollgym.placement.ray import RayPlacement; "
        "RayPlacement.connect(None, run_id='hermetic', env={}); " + _GCS
    ),
}


@pytest.fixture
def unrelated_cluster() -> Iterator[str]:
    """Someone else's Ray: a head node on a free port; yields its GCS address."""
    if RAY_CLI is None:
        pytest.skip("the ray command line is not installed")
    root = Path(tempfile.mkdtemp(prefix="rgrayx", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    command = [
        RAY_CLI,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={root / 'ray'}",
    ]
    with (root / "head.log").open("ab") as log:
        head = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **RAY_ENV},
        )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # its own group only, never `ray stop`
        head.wait()
        shutil.rmtree(root, ignore_errors=True)


def _gcs_of(probe: str, env: dict[str, str], *, must: bool = True) -> str:
    """The GCS port of the cluster ``probe`` ended up in ("" when it failed and may not).

    The port, not the address: Ray reports the node's own IP, whatever ``--node-ip-address``.
    """
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("GCS ")]
    if must:
        assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    return lines[-1].split()[1].rsplit(":", 1)[1] if lines else ""


def test_the_ray_tests_start_their_own_cluster_next_to_an_unrelated_one(
    unrelated_cluster: str,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        **RAY_ENV,
        "PYTHONPATH": pythonpath(),
        "RAY_ADDRESS": unrelated_cluster,  # the worst case: the shell points at the other one
    }
    theirs = unrelated_cluster.rsplit(":", 1)[1]
    # the control: a plain ray.init() does join the unrelated cluster, once it is up
    assert wait_for(
        lambda: _gcs_of(PROBES["plain ray.init()"], env, must=False) == theirs,
        timeout=120,
        interval=2.0,
    )
    for name in ("the tests' RAY_INIT", "RayPlacement.connect(None)"):
        assert _gcs_of(PROBES[name], env) != theirs, name
