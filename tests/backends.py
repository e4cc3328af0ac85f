"""Real trace backends on loopback for the end-to-end tests: Arize Phoenix (the ``phoenix``
extra, in this Python) and an MLflow tracking server (in a venv of its own that
``scripts/test.sh`` installs, since MLflow pins its own dependencies).

Each starts in a temporary working directory, in a process group of its own (MLflow's server
starts worker children), answers OTLP/HTTP at ``/v1/traces``, and is stopped with its whole
group at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from waits import wait_for

#: MLflow's venv and the stamp ``scripts/test.sh`` leaves when the install succeeded.
MLFLOW_VERSION = "3.17.2"
MLFLOW_VENV = Path(
    os.environ.get("ROLLGYM_MLFLOW_VENV", Path.home() / ".cache" / "rollgym-mlflow" / "venv")
)
MLFLOW_PYTHON = MLFLOW_VENV / "bin" / "python"
MLFLOW_OK = MLFLOW_VENV / f"rollgym-mlflow-{MLFLOW_VERSION}.ok"
#: Reads an MLflow experiment's traces with MLflow's own client (in MLflow's venv).
MLFLOW_READ = Path(__file__).resolve().parent / "e2e" / "mlflow_read.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``OTEL_*`` (the backend traces nothing itself)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, **extra}


def _answers(url: str) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextmanager
def _serving(command: list[str], env: dict[str, str], work: Path, health: str) -> Iterator[None]:
    log_path = work / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=log, cwd=work, start_new_session=True
        )
        try:
            up = wait_for(lambda: _answers(health) or process.poll() is not None, 180, 0.5)
            if process.poll() is not None:
                raise RuntimeError(f"{command[2]} exited: {log_path.read_text()[-2000:]}")
            if not up:
                raise RuntimeError(f"{health} did not answer in 180 s")
            yield
        finally:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(20)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextmanager
def phoenix_server(work: Path) -> Iterator[str]:
    """Phoenix on a free loopback port (its gRPC port, which cannot be switched off, on
    another); yields its base URL (the UI, the REST API and OTLP/HTTP at ``/v1/traces``)."""
    port = free_port()
    env = _clean_env(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_WORKING_DIR=str(work),
        PHOENIX_TELEMETRY_ENABLED="false",
    )
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "phoenix.server.main", "serve"]
    with _serving(command, env, work, base + "/healthz"):
        yield base


@contextmanager
def mlflow_server(work: Path) -> Iterator[str]:
    """An MLflow tracking server (SQLite store, no job runner) on a free loopback port;
    yields its base URL. OTLP/HTTP goes to ``/v1/traces`` with the experiment in the
    ``x-mlflow-experiment-id`` header."""
    port = free_port()
    env = _clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    command = [
        str(MLFLOW_PYTHON), "-m", "mlflow", "server",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
        "--default-artifact-root", str(work / "artifacts"),
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _serving(command, env, work, base + "/health"):
        yield base


def mlflow_traces(base: str, experiment_id: str = "0") -> list[dict[str, Any]]:
    """The traces of experiment ``experiment_id`` in the MLflow at ``base``, as MLflow's own
    client reads them (each with its ``trace_id`` and ``spans``)."""
    proc = subprocess.run(
        [str(MLFLOW_PYTHON), str(MLFLOW_READ), base, experiment_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces: list[dict[str, Any]] = json.loads(proc.stdout)
    return traces
