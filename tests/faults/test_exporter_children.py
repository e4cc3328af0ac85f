"""kill -9 of the driver: every child it and its servers started dies within seconds, quietly.

Quietly means no traceback in the console nor in any server's log: an orphaned server stops at
once and says so in one line.

The span exporter children (the driver's and each server's) are the ones at stake: they are
busy posting to a slow OTLP backend when the driver dies, and used to wait out its request
timeouts (52-58 s, holding the terminal: a ``| tee`` waited) and then print a
``BrokenPipeError`` traceback. The children are listed by pid before the kill and watched from
outside (``/proc``), forked (the default) and spawned (``ROLLGYM_FORK_SERVER=0``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from e2e_support import children_of, killed_if_left_running, wait_for
from otlp_sink import OtlpSink
from telemetry_helpers import quickstart_job

from procs import alive as _alive

pytestmark = pytest.mark.e2e

#: "Within seconds": an exporter whose parent died posts what is left for 3 s at most.
GONE_WITHIN_S = 10.0
#: The backend's request timeout (30 s, in milliseconds): far beyond GONE_WITHIN_S, so waiting one out fails the test.
EXPORT_TIMEOUT_MS = "30000"


def _tracebacks(text: str) -> list[str]:
    """Each traceback (or ``Exception ignored``) in ``text``, from its first line to the
    exception line."""
    return re.findall(
        r"(?:Traceback \(most recent call last\)|Exception ignored).*?\n(?=\S)[^\n]*", text, re.S
    )


@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked", "spawned"])
def test_children_die_with_a_killed_driver_within_seconds_without_a_traceback(
    tmp_path: Path, fork: str
) -> None:
    job = quickstart_job(tmp_path, telemetry={"flush_timeout_s": 30.0}, repeats=200, concurrency=32)
    with OtlpSink("slow", answer_after_s=120.0) as sink:
        env = job.env(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
                "OTEL_EXPORTER_OTLP_TIMEOUT": EXPORT_TIMEOUT_MS,
                "ROLLGYM_FORK_SERVER": fork,
            }
        )
        # stderr through a pipe, as `rollgym run ... 2>&1 | tee`: its end comes only when
        # every process holding it (the driver's children too) is gone
        proc = subprocess.Popen(
            job.command(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path
        )
        assert proc.stderr is not None
        console = _Drain(proc.stderr)
        with killed_if_left_running(proc):  # type: ignore[arg-type]
            # every exporter is busy: the slow backend holds requests from the processes
            assert wait_for(lambda: sink.requests >= 3, timeout=120)
            assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 500, timeout=120)
            children = children_of(proc.pid)
            assert len(children) >= 6, children  # a store, servers, exporter children
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed_at = time.monotonic()
            gone = wait_for(lambda: not any(_alive(pid) for pid in children), GONE_WITHIN_S)
            lingering = {pid: _cmdline(pid) for pid in children if _alive(pid)}
            released = console.ended.wait(max(0.1, killed_at + GONE_WITHIN_S - time.monotonic()))
            for pid in lingering:  # leave nothing behind, even when failing
                _kill(pid)
        assert gone, f"alive {time.monotonic() - killed_at:.1f} s after the kill: {lingering}"
        assert released, "the console pipe (a `| tee`) was still held after the children died"
    assert _tracebacks(console.text()) == []
    for log in sorted((job.out / "logs").glob("*.log")):
        assert _tracebacks(log.read_text(errors="replace")) == [], log.name


class _Drain:
    """Reads a pipe to its end on a thread; ``ended`` is set when every writer closed it."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        self._chunks: list[bytes] = []
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while chunk := self._pipe.read1(65536):
            self._chunks.append(chunk)
        self.ended.set()

    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
