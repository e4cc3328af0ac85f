"""The span exporter child is forked from a single-threaded recording process (a server just
forked by the fork server), spawned otherwise, and exports every span either way.

Each case runs its recording process as a fresh interpreter (a test process may run threads of
its own); the OTLP sink is a plain HTTP server here that counts the spans it is sent.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollgym.forked_child import ENV_FORK_SERVER, fork_piped

ROOT = Path(__file__).resolve().parents[3]
SPANS = 1_500

# The recording process: a shipper to the sink, SPANS spans, shutdown; then how its child was
# started (its command line: a forked child keeps this script's) and the shipper's counts.
RECORDER = """
import json, os, sys, threading, time
from rollgym.telemetry.pipeline.shipper import SpanShipper
threads_before = threading.active_count()
shipper = SpanShipper(url=sys.argv[1], headers=None, resource={"service.name": "t"},
                      timeout_s=5.0, schedule_delay_ms=10, max_export_batch_size=200)
with open(f"/proc/{shipper.child_pid}/cmdline", "rb") as f:
    child_cmdline = f.read().split(b"\\0")[:-1]
spawned = b"rollgym.telemetry.pipeline.child" in child_cmdline
def listed_fds():
    return sorted(int(fd) for fd in os.listdir(f"/proc/{shipper.child_pid}/fd"))
# a forked child closes the parent's descriptors as it starts: wait for that (30 s at most)
# rather than list them in the moment between the fork and the closes
deadline = time.monotonic() + 30.0
child_fds = listed_fds()
while not spawned and child_fds != [0, 1, 2] and time.monotonic() < deadline:
    time.sleep(0.01)
    child_fds = listed_fds()
T0 = 1_700_000_000_000_000_000
for i in range(int(sys.argv[2])):
    shipper.on_end((1, i + 1, 0, False, "s", 0, T0, T0 + 1, {"i": i}, None, None, 0, None,
                    ("rollgym", None, None), None))
shipper.shutdown(timeout_s=30.0)
shipper.counts.close()
counts = shipper.counts.snapshot()
print(json.dumps({"threads_before": threads_before,
                  "spawned": spawned,
                  "child_fds": child_fds,
                  "exported": counts["spans_exported"], "dropped": counts["spans_dropped"]}))
"""


class _Sink(http.server.BaseHTTPRequestHandler):
    spans = 0
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with _Sink.lock:
            _Sink.spans += n
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def sink() -> Iterator[str]:
    _Sink.spans = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def _record(url: str, fork: bool) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env[ENV_FORK_SERVER] = "1" if fork else "0"
    done = subprocess.run(
        [sys.executable, "-c", RECORDER, url, str(SPANS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forking is Linux-only")
def test_a_single_threaded_process_forks_its_exporter_and_every_span_arrives(sink: str) -> None:
    result = _record(sink, fork=True)
    assert result["threads_before"] == 1
    assert result["spawned"] is False  # forked: the child runs the recorder's command line
    assert result["child_fds"] == [0, 1, 2]  # nothing of the parent's is held open
    assert (result["exported"], result["dropped"]) == (SPANS, 0)
    assert _Sink.spans == SPANS


def test_with_forking_off_the_exporter_is_spawned_and_every_span_arrives(sink: str) -> None:
    result = _record(sink, fork=False)
    assert result["spawned"] is True
    assert (result["exported"], result["dropped"]) == (SPANS, 0)
    assert _Sink.spans == SPANS


def test_fork_piped_refuses_while_another_thread_runs() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert fork_piped(lambda inp, out: None) is None
    finally:
        stop.set()
        other.join()


#: Run in a fresh interpreter: forking needs a process with one thread, which the test
#: process (with other tests' threads) may not be.
PIPED = """
import os
from rollgym.forked_child import ENV_FORK_SERVER, fork_piped

def upper(inp, out):
    out.write(inp.read().upper())
    out.flush()

child = fork_piped(upper)
assert child is not None and child.stdin is not None and child.stdout is not None
child.stdin.write(b"spans")
child.stdin.close()
assert child.stdout.read() == b"SPANS"
assert child.wait(timeout=30) == 0
child.stdout.close()
os.environ[ENV_FORK_SERVER] = "0"
assert fork_piped(upper) is None
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forking is Linux-only")
def test_fork_piped_runs_the_function_on_its_pipes_and_exits() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop(ENV_FORK_SERVER, None)
    done = subprocess.run(
        [sys.executable, "-c", PIPED], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
