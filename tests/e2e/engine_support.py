"""Start-up of a real OpenAI-compatible engine (llama.cpp, vLLM) for the engine tests: a free
port, one process, ready when ``/v1/models`` answers, stopped (then killed) at the end."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from e2e_support import wait_for


def free_port() -> int:
    """A loopback port nothing listens on now (the engine binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def models_ok(url: str) -> bool:
    """Whether the engine at ``url`` answers ``GET /v1/models`` (it is ready to serve)."""
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def serving(
    name: str,
    command: Sequence[str],
    url: str,
    log_path: Path,
    *,
    start_timeout_s: float,
    stop_timeout_s: float = 30.0,
    poll_s: float = 1.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until ``url`` answers (or the process exits: RuntimeError with the end
    of its log); yield the process; terminate it at the end, killing it if it lingers."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
        )
        try:
            up = wait_for(
                lambda: models_ok(url) or proc.poll() is not None,
                timeout=start_timeout_s,
                interval=poll_s,
            )
            if not up or proc.poll() is not None:
                raise RuntimeError(f"{name} did not start: " + log_path.read_text()[-4000:])
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


@contextmanager
def llama_server(folder: Path, model: Path, *extra: str) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server on 127.0.0.1 serving ``model`` as ``tiny``; its URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512", "--n_threads", "1",
        *extra,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = folder / "engine.log"
    with serving("llama.cpp server", command, url, log, start_timeout_s=180, poll_s=0.1):
        yield url
