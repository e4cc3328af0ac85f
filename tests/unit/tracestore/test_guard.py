"""The store's port against a browser: DNS rebinding and cross-site OTLP writes are refused.

Requests go to a real store process on 127.0.0.1 with the headers a browser would send.
"""

from __future__ import annotations

import marshal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollgym.telemetry.pipeline.frames import RECORDS_TYPE, pack_batch, pack_records
from rollgym.tracestore.guard import allowed_hosts, host_name
from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

EMPTY_EXPORT = ExportTraceServiceRequest().SerializeToString()


def _status(url: str, *, data: bytes | None = None, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_rebound_host_cannot_read_the_viewer(store: TraceStoreProcess) -> None:
    base = store.endpoint
    port = base.rsplit(":", 1)[1]
    assert _status(f"{base}/api/overview", headers={}) == 200
    assert _status(f"{base}/api/overview", headers={"Host": f"localhost:{port}"}) == 200
    for evil in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        assert _status(f"{base}/api/overview", headers={"Host": evil}) == 403
        assert _status(f"{base}/", headers={"Host": evil}) == 403


def test_otlp_writes_from_a_web_page_are_refused(store: TraceStoreProcess) -> None:
    url = store.traces_endpoint
    protobuf = {"Content-Type": "application/x-protobuf"}
    assert _status(url, data=EMPTY_EXPORT, headers=protobuf) == 200  # an exporter
    # a page's fetch(): same body, but the browser adds Origin
    origin = {**protobuf, "Origin": "https://evil.example"}
    assert _status(url, data=EMPTY_EXPORT, headers=origin) == 403
    # a "simple" no-cors POST is text/plain (no preflight): not OTLP
    assert _status(url, data=EMPTY_EXPORT, headers={"Content-Type": "text/plain"}) == 415
    rebound = {**protobuf, "Host": "evil.example"}
    assert _status(url, data=EMPTY_EXPORT, headers=rebound) == 403


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:4318", "127.0.0.1"),
        ("[::1]:80", "::1"),
        ("LocalHost", "localhost"),
        ("::1", "::1"),
    ],
)
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


def test_allowed_hosts_add_the_bound_address_and_extras_never_any() -> None:
    assert "10.0.0.5" in allowed_hosts("10.0.0.5")
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")
    assert "box.lan" in allowed_hosts("0.0.0.0", ["Box.lan"])


def _this_machines_other_address() -> str | None:
    """An address of this machine that is not loopback, or None where it has none."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a source address
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_span_records_are_taken_from_this_machine_only(tmp_path: Path) -> None:
    """Records are marshal data: a peer beyond loopback, even with the token, must send OTLP."""
    address = _this_machines_other_address()
    if address is None:
        pytest.skip("this machine has no address beyond loopback to send from")
    token = "t" * 40
    store = start_trace_store(
        tmp_path / "traces.db", tmp_path / "store.log", host="0.0.0.0", token=token
    )
    try:
        port = store.endpoint.rsplit(":", 1)[1]
        body = pack_records(marshal.dumps({"service.name": "guard-test"}), pack_batch([])[4:])
        auth = {"Authorization": f"Bearer {token}"}
        records = {**auth, "Content-Type": RECORDS_TYPE}
        protobuf = {**auth, "Content-Type": "application/x-protobuf"}
        remote = f"http://{address}:{port}/v1/traces"
        assert _status(remote, data=EMPTY_EXPORT, headers=protobuf) == 200
        assert _status(remote, data=body, headers=records) == 403
        local = f"http://127.0.0.1:{port}/v1/traces"
        assert _status(local, data=body, headers=records) == 200
    finally:
        store.stop()
