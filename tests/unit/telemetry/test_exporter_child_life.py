"""The exporter child's end: what it says about the batch in flight, and that it never outlives
its parent or prints a traceback.

Each case runs a real child (spawned, or forked from a fresh single-threaded interpreter)
posting to a real OTLP/HTTP sink on loopback (``tests/faults/otlp_sink.py``) that counts the
span ids it received whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rollgym
from rollgym.telemetry.pipeline.shipper import SpanShipper

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from otlp_sink import OtlpSink  # noqa: E402

from waits import wait_for  # noqa: E402

T0 = 1_700_000_000_000_000_000
#: The recording processes started here import the rollgym this test imported.
ENV = {**os.environ, "PYTHONPATH": str(Path(rollgym.__file__).resolve().parents[1])}


def _record(i: int, pad: int = 0) -> tuple[Any, ...]:
    attributes = {"i": i, "pad": "x" * pad} if pad else {"i": i}
    return (1, i + 1, 0, False, "s", 0, T0, T0 + 1, attributes, None, None, 0, None,
            ("rollgym", None, None), None)  # fmt: skip


@pytest.fixture
def slow() -> Iterator[OtlpSink]:
    with OtlpSink("slow", answer_after_s=120.0) as sink:
        yield sink


@pytest.fixture
def tarpit() -> Iterator[OtlpSink]:
    with OtlpSink("tarpit", read_bytes_per_s=20_000) as sink:
        yield sink


def _shipper(url: str, timeout_s: float = 60.0, batch: int = 100) -> SpanShipper:
    return SpanShipper(
        url=url + "/v1/traces",
        headers=None,
        resource={"service.name": "t"},
        timeout_s=timeout_s,
        schedule_delay_ms=10,
        max_export_batch_size=batch,
    )


def test_stopped_while_awaiting_an_answer_the_batch_is_unknown_not_dropped(
    slow: OtlpSink,
) -> None:
    shipper = _shipper(slow.url)
    for i in range(300):
        shipper.on_end(_record(i))
    assert wait_for(lambda: len(slow.span_ids()) == 100)  # the first batch is out, unanswered
    shipper.shutdown(timeout_s=1.0)  # the flush limit: the child is stopped mid-request
    shipper.counts.close()
    counts = shipper.counts.snapshot()
    assert counts["spans_unknown"] == 100 == len(slow.span_ids())
    assert counts["spans_exported"] == 0
    assert counts["spans_dropped"] == 200
    assert counts.get("spans_dropped_by_reason") == {"shutdown": 200}


def test_stopped_while_half_sent_to_a_tarpit_nothing_it_got_is_called_dropped(
    tarpit: OtlpSink,
) -> None:
    shipper = _shipper(tarpit.url, batch=50)
    for i in range(150):
        shipper.on_end(_record(i, pad=2000))  # ~100 kB a request: seconds at 20 kB/s
    assert wait_for(lambda: shipper.counts.in_flight > 0)  # a request is going out
    shipper.shutdown(timeout_s=1.0)
    shipper.counts.close()
    time.sleep(1.0)  # what the kernel still had buffered arrives (or not) after the stop
    counts = shipper.counts.snapshot()
    received = len(tarpit.span_ids())
    assert received <= counts["spans_unknown"] + counts["spans_exported"]
    assert counts["spans_exported"] + counts["spans_unknown"] + counts["spans_dropped"] == 150


def test_a_broken_connection_after_the_request_went_out_is_unknown_not_sent_again() -> None:
    from rollgym.telemetry.pipeline.transport import NoAnswer, PlainHttp

    with OtlpSink("hangup") as sink:  # reads each request whole, then hangs up unanswered
        transport = PlainHttp(sink.url + "/v1/traces", {"Content-Type": "x"})
        with pytest.raises(NoAnswer):
            transport.post(_request_body(10), (2.0, 30.0))
        assert len(sink.span_ids()) == 10  # it has them: calling them lost would be a lie
        assert sink.requests == 1  # and they are not sent again (stored twice)


def _request_body(n: int) -> bytes:
    from rollgym.telemetry.pipeline.wire import encode_request

    return encode_request({"service.name": "t"}, [_record(i) for i in range(n)])


# A recording process of its own (a test process runs threads, so it would spawn its child;
# this one forks it, as a server does), which reports its child's pid and then waits to be
# killed. argv: sink URL, "fork" or "spawn".
PARENT = """
import os, sys, time
if sys.argv[2] == "spawn":
    os.environ["ROLLGYM_FORK_SERVER"] = "0"
import signal, socket
# what a server's event loop leaves behind: a signal wakeup descriptor (closed in a fork)
a, b = socket.socketpair(); a.setblocking(False); signal.set_wakeup_fd(a.fileno())
from rollgym.telemetry.pipeline.shipper import SpanShipper
shipper = SpanShipper(url=sys.argv[1] + "/v1/traces", headers=None,
                      resource={"service.name": "t"}, timeout_s=60.0, schedule_delay_ms=10,
                      max_export_batch_size=100)
T0 = 1_700_000_000_000_000_000
for i in range(1000):
    shipper.on_end((1, i + 1, 0, False, "s", 0, T0, T0 + 1, {"i": i}, None, None, 0, None,
                    ("rollgym", None, None), None))
print(shipper.child_pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_the_child_dies_within_seconds_of_a_killed_parent_without_a_traceback(
    slow: OtlpSink, tmp_path: Path, how: str
) -> None:
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, slow.url, how],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=ENV,
            text=True,
        )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert wait_for(lambda: slow.requests >= 1)  # the child waits on the slow backend
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # the request timeout is 60 s: a child waiting it out fails here
        gone = wait_for(lambda: not _alive(child), timeout=10.0)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the exporter child outlived its parent by 10 s"
    text = stderr_path.read_text()
    assert "Traceback" not in text and "Exception ignored" not in text, text
    assert "BrokenPipeError" not in text, text


def test_a_forked_child_hears_signals_without_its_parents_wakeup_descriptor(
    tmp_path: Path,
) -> None:
    """SIGUSR1 (stop retrying) in a child forked from a process with a wakeup descriptor:
    the descriptor is closed in the child, and writing to it printed a traceback."""
    script = """
import os, signal, socket, sys, time
a, b = socket.socketpair(); a.setblocking(False); signal.set_wakeup_fd(a.fileno())
from rollgym.forked_child import fork_piped
def run(inp, out):
    signal.signal(signal.SIGUSR1, lambda *_: None)
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.1)
child = fork_piped(run)
assert child is not None
print(child.wait())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert proc.stdout.strip() == "0", proc.stderr
    assert "Exception ignored" not in proc.stderr and "Bad file descriptor" not in proc.stderr


def test_exported_in_process_too_the_batch_in_its_request_at_the_limit_is_unknown(
    slow: OtlpSink,
) -> None:
    """An SDK exporter fed in-process (gRPC, console, an exporter passed in, OTLP/HTTP when
    the child cannot start): the same counts as the child's."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from rollgym.telemetry import spans
    from rollgym.telemetry.groups import PRESETS
    from rollgym.telemetry.setup import TelemetrySettings, setup_telemetry

    settings = TelemetrySettings(
        groups=PRESETS["default"],
        traces_exporter="otlp",
        endpoint=slow.url,
        export_timeout_s=60.0,
        max_export_batch_size=8,
        schedule_delay_ms=5,
    )
    exporter = OTLPSpanExporter(endpoint=slow.url + "/v1/traces", timeout=60)
    handle = setup_telemetry(settings, service_name="t", run_id="r", span_exporter=exporter)
    for i in range(20):
        with spans.rollout_span(str(i)):
            pass
    assert wait_for(lambda: len(slow.span_ids()) == 8)  # the first request is out, unanswered
    handle.shutdown(1.0)
    counts = handle.counts()
    assert counts["spans_unknown"] == 8 == len(slow.span_ids())
    assert counts["spans_exported"] + counts["spans_dropped"] == 12


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_hang_up_after_sending_is_sent_again_only_to_a_store_that_keeps_a_span_once(
    idempotent: bool,
) -> None:
    """The run's own trace store keeps a span once (``INSERT OR IGNORE``): there a request whose
    connection broke after it went out goes again; anywhere else it is unknown, not resent."""
    from rollgym.telemetry.pipeline.child import OK, UNKNOWN, Poster

    with OtlpSink("hangup", hangups=1) as sink:
        poster = Poster(sink.url + "/v1/traces", {}, 5.0, None, 10.0, idempotent=idempotent)
        verdict = poster.post(_request_body(10))
        assert len(sink.span_ids()) == 10
        if idempotent:
            assert (verdict, sink.requests, sink.duplicates()) == (OK, 2, 10)
        else:
            assert (verdict, sink.requests) == (UNKNOWN, 1)
