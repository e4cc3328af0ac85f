"""``impl: mymodule:MyAgent`` beside the config works with the ``rollgym`` console script.

The console script's ``sys.path[0]`` is its own folder, not the working directory (unlike
``python -m rollgym``), so these run the installed ``rollgym`` script itself, in a temporary
working directory holding the module, with nothing but rollgym's sources on PYTHONPATH.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from console_script import require_script, rollouts, run_script, script_env
from e2e_support import server_pids_alive, wait_for

pytestmark = pytest.mark.e2e

MODULE = textwrap.dedent(
    """
    from rollgym.servers import Agent


    class MyAgent(Agent):
        async def run(self, row, rollout):
            return {"reward": 1.0, "echo": row["question"]}
    """
)


def _env() -> dict[str, str]:
    return script_env(telemetry=False)  # not tests/e2e: the module is found only in the cwd


def _job(root: Path) -> Path:
    (root / "mymodule.py").write_text(MODULE)
    (root / "rows.jsonl").write_text('{"question": "hi"}\n{"question": "there"}\n')
    config = {
        "run": {"input": "rows.jsonl", "output_dir": "out", "agent": "mine"},
        "servers": {"mine": {"kind": "agent", "impl": "mymodule:MyAgent"}},
        "telemetry": {"preset": "off", "exporter": "none"},
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def script() -> Path:
    return require_script()


def test_run_imports_a_module_of_the_working_directory(tmp_path: Path, script: Path) -> None:
    config = _job(tmp_path)
    run_script(tmp_path, "run", config.name, "--no-table", env=_env(), timeout=120)
    records = rollouts(tmp_path / "out")
    assert sorted(r["result"]["echo"] for r in records) == ["hi", "there"]


def test_serve_imports_a_module_of_the_working_directory(tmp_path: Path, script: Path) -> None:
    config = _job(tmp_path)
    proc = subprocess.Popen(
        [str(script), "serve", config.name],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        name, url = proc.stdout.readline().split()
        assert name == "mine" and url.startswith("http://127.0.0.1:")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert wait_for(lambda: not server_pids_alive(under=str(tmp_path)), timeout=30)
