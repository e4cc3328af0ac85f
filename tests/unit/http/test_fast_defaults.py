"""The fastest event loop and HTTP parser where they install, the plain ones where they do not.

Each fallback is exercised by hiding the package (``sys.modules[name] = None`` makes its import
raise ImportError), the way an install without it behaves.
"""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rollgym import event_loop
from rollgym.http import bounded_reads


def test_servers_parse_with_httptools_when_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ROLLGYM_HTTP_PARSER", raising=False)
    chosen = bounded_reads.bounded_protocol()
    assert issubclass(chosen, HttpToolsProtocol)
    assert chosen.read_timeout_s == bounded_reads.REQUEST_READ_TIMEOUT_S  # type: ignore[attr-defined]


def test_servers_fall_back_to_h11_without_httptools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLGYM_HTTP_PARSER", raising=False)
    monkeypatch.setitem(sys.modules, "httptools", None)
    monkeypatch.delitem(sys.modules, "rollgym.http.bounded_httptools", raising=False)
    with pytest.raises(ImportError):
        importlib.import_module("rollgym.http.bounded_httptools")
    assert bounded_reads.bounded_protocol() is bounded_reads.BoundedH11Protocol


def test_h11_can_be_asked_for_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLGYM_HTTP_PARSER", "h11")
    assert issubclass(bounded_reads.bounded_protocol(), H11Protocol)


def test_processes_run_uvloop_when_it_is_installed() -> None:
    import uvloop

    factory = event_loop.loop_factory()
    assert factory is not None
    assert event_loop.run(_loop_type()) is uvloop.Loop


def test_processes_fall_back_to_asyncios_loop_without_uvloop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert event_loop.loop_factory() is None
    loop_type = event_loop.run(_loop_type())
    assert issubclass(loop_type, asyncio.BaseEventLoop)
    assert loop_type.__module__.startswith("asyncio")


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())
