"""Start-up of a real OpenAI-compatible engine (llama.cpp, vLLM) for the engine tests: a free
port, one process, ready when ``/v1/models`` answers, stopped (then killed) at the end; for
vLLM also where its venv is, the tiny model it serves and the command line every vLLM test
starts from."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from e2e_support import HERE, wait_for

from server_specs import Spec, proxied_servers

#: vLLM's CPU build has a venv of its own (its pins clash with the project's); scripts/test.sh
#: makes it and writes :data:`VLLM_INSTALLED` once vLLM works there.
VLLM_VERSION = "0.32.0"
VLLM_VENV = Path(
    os.environ.get("ROLLGYM_VLLM_VENV") or Path.home() / ".cache" / "rollgym-vllm" / "venv"
)
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
VLLM_INSTALLED = VLLM_VENV / f"rollgym-vllm-{VLLM_VERSION}.ok"
#: Why a vLLM test skips where :data:`VLLM_INSTALLED` is missing.
VLLM_MISSING = (
    f"vLLM's CPU build is not installed in {VLLM_VENV} (scripts/test.sh installs it; "
    "ROLLGYM_SKIP_VLLM=1 skips that step)"
)


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


#: How much lower than the processes under test an engine runs when a test asks for it (its
#: nice, and its session's where Linux schedules by session, the autogroups). On a CPU the
#: engine stands in for a GPU and can take the cores from rollgym's own servers: on a 2-core
#: machine with vLLM's CPU build generating, Linux (6.18, autogroups on) left the proxy and the
#: agent runnable but unscheduled for up to 20 s (their ``/proc/<pid>/schedstat`` wait), so a
#: rollout's give-up reached vLLM only that late. At 5 the same rounds abort at once. Only the
#: tests of how soon an engine hears of a give-up ask for it: with both cores held by other
#: work a lowered engine is slower (a NeMo Gym run on a lowered llama.cpp timed out so).
ENGINE_NICE = 5


def run_below_tests(pid: int) -> None:
    """Lower process ``pid`` (started in a session of its own) to :data:`ENGINE_NICE`: the
    task's nice, which the engine's own processes inherit, and its session's autogroup where
    the kernel has them (``/proc/<pid>/autogroup``); where either cannot be set it is left."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, ENGINE_NICE)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(ENGINE_NICE))


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
    below_tests: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (``below_tests``: in a session of its own, lowered, see
    :func:`run_below_tests`) until ``url`` answers (or the process exits: RuntimeError with the
    end of its log); yield the process; terminate it at the end, killing it if it lingers."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=below_tests,  # its own autogroup, lowered alone
        )
        if below_tests:
            run_below_tests(proc.pid)
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


def tiny_hf_model(out: Path, vocab_size: int = 0) -> Path:
    """The tiny random Llama of ``tiny_hf_llama.py`` written to ``out`` (by vLLM's Python: it
    has transformers; nothing is downloaded); ``vocab_size`` 0 keeps its own small vocabulary."""
    written = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "tiny_hf_llama.py"), str(out), str(vocab_size)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert written.returncode == 0, written.stderr
    return out


def vllm_env(**extra: str) -> dict[str, str]:
    """This process's environment for vLLM: no ``OTEL_*`` or ``PYTHON*`` variables of ours
    (the test sets its own), a 1 GiB KV cache (the CPU build's default takes far more), and
    ``extra``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON"))}
    return {**kept, "VLLM_CPU_KVCACHE_SPACE": "1", **extra}


def vllm_command(model: Path, port: int, *extra: str, max_model_len: int = 2048) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:``port`` serving ``model`` as ``tiny``, eager (no
    torch.compile warm-up: most of a start-up on a CPU), with ``extra`` options."""
    return [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
        "--enforce-eager", *extra,
    ]  # fmt: skip


#: The marks of every vLLM test module: vLLM's start-up (minutes on a loaded 2-core machine)
#: counts against the first test that uses it.
VLLM_MARKS = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.timeout(1500)]


def skip_without_vllm() -> None:
    """Skip the calling test module, saying why, where vLLM's CPU build is not installed."""
    if not VLLM_INSTALLED.exists():
        pytest.skip(VLLM_MISSING, allow_module_level=True)


@contextmanager
def vllm_server(
    folder: Path,
    model: Path,
    *extra: str,
    env: Mapping[str, str],
    max_model_len: int = 2048,
    below_tests: bool = False,
) -> Iterator[str]:
    """vLLM (:func:`vllm_command`) serving ``model`` with ``extra`` options and ``env``
    (:func:`vllm_env`), its log in ``folder``, warmed up with a chat call (``below_tests``:
    see :func:`serving`); its URL."""
    port = free_port()
    command = vllm_command(model, port, *extra, max_model_len=max_model_len)
    url = f"http://127.0.0.1:{port}"
    log = folder / "vllm.log"
    with serving("vLLM", command, url, log, start_timeout_s=900, env=env, below_tests=below_tests):
        chat_warm_up(url)
        yield url


def vllm_servers(engine_url: str, **changes: Mapping[str, Any] | None) -> dict[str, Spec]:
    """:func:`server_specs.proxied_servers` in front of vLLM serving ``tiny``, the proxy
    sending each call's request id as ``X-Request-Id`` (vLLM takes it as its own id)."""
    return proxied_servers(engine_url, "tiny", **{"policy": {"request_id": "header"}, **changes})


# --- vLLM's own record of what it runs (its /metrics) ----------------------------------------
_RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)
_FINISHED = re.compile(
    r'^vllm:request_success_total\{[^}]*finished_reason="(\w+)"[^}]*\} ([0-9.eE+-]+)$', re.M
)


def _metrics(url: str) -> str:
    """vLLM's ``/metrics`` page (Prometheus text) as it is now."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def finished(url: str) -> dict[str, int]:
    """vLLM's count of requests finished so far, by why (``length``, ``stop`` ...); a request
    aborted because its client left is not counted."""
    counts: dict[str, int] = {}
    for reason, value in _FINISHED.findall(_metrics(url)):
        counts[reason] = counts.get(reason, 0) + int(float(value))
    return counts


def running(url: str) -> int:
    """vLLM's count of requests it is generating for now (its ``/metrics`` gauge)."""
    return int(sum(float(v) for v in _RUNNING.findall(_metrics(url))))


class RunningWatch:
    """Polls vLLM's running count in a thread: the most it saw, and whether it saw any."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.most = max(self.most, running(self.url))
            self._stop.wait(0.05)

    def __enter__(self) -> RunningWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def chat_warm_up(url: str) -> None:
    """One two-token chat call to the engine at ``url``. vLLM's CPU build lost its worker
    process (and then stopped) when its very first request was a 4-token completion prompt
    (twice, in tests/e2e/test_vllm_engine_paths.py); a chat call first, as every rollout
    makes, and it serves everything after."""
    warm_up = urllib.request.Request(
        url + "/v1/chat/completions",
        data=b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(warm_up, timeout=300) as answer:
        assert answer.status == 200
