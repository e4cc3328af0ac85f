"""Servers start all at once when the placement fixes their addresses in advance.

Checked by order, not by time: the fake placement's dependency cannot become healthy until
the servers that name it have been started, which serial (dependency-order) starts would
never do; and a dependent is told its dependency's address before that one is up.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp

from rollgym.config import validate_config
from rollgym.placement.launcher import _Launch
from rollgym.placement.local import LocalPlacement
from rollgym.placement.reserved import Reservations
from rollgym.servers.spec import ServeSpec
from server_specs import quickstart_servers


class _OrderedPlacement:
    """Fixed addresses; 'policy' (named by everyone) is healthy only after all others started."""

    def __init__(self, *, fixed: bool) -> None:
        self.fixed = fixed
        self.started: list[str] = []
        self.healthy: list[str] = []
        self.specs: dict[str, ServeSpec] = {}
        self.others_started = asyncio.Event()

    def reserve(self, instance: str) -> str | None:
        return f"http://127.0.0.1:1{len(instance)}{ord(instance[0])}" if self.fixed else None

    async def start(
        self, spec: ServeSpec, *, session: aiohttp.ClientSession, timeout_s: float
    ) -> str:
        self.started.append(spec.instance)
        self.specs[spec.instance] = spec
        if len(self.started) == 4:
            self.others_started.set()
        if spec.name == "policy":
            await asyncio.wait_for(self.others_started.wait(), 60)  # a hang guard, not a timing
        self.healthy.append(spec.instance)
        return self.reserve(spec.instance) or f"http://127.0.0.1:2{len(self.started)}"

    def launched(self) -> dict[str, object]:
        return {}

    async def restart(self, name: str, timeout_s: float) -> str:
        raise AssertionError("not restarted here")

    async def stop(self, grace_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def _config(tmp_path: Path):
    return validate_config(
        {
            "run": {"input": str(tmp_path / "rows.jsonl"), "agent": "solver"},
            "servers": quickstart_servers(),
        }
    )


async def test_a_slow_dependency_delays_none_of_the_servers_that_name_it(tmp_path):
    placement = _OrderedPlacement(fixed=True)
    launch = _Launch(_config(tmp_path), "run", tmp_path, placement)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        await launch.run(session)
    # every server was started before the slow one they all name was healthy
    assert set(placement.started) == {"policy", "arith", "keys", "solver", "walker"}
    assert placement.healthy[-1] == "policy"
    # ... and each was told the addresses of the servers it calls, fixed in advance
    solver = placement.specs["solver"].server_urls
    assert solver["policy"] == placement.reserve("policy")
    assert solver["arith"] == placement.reserve("arith")
    assert launch.urls["walker"] == placement.reserve("walker")


async def test_without_fixed_addresses_servers_start_in_dependency_order(tmp_path):
    placement = _OrderedPlacement(fixed=False)
    placement.others_started.set()  # nothing to wait for: the order is the dependency order
    launch = _Launch(_config(tmp_path), "run", tmp_path, placement)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        await launch.run(session)
    order = placement.started
    assert order.index("policy") < order.index("keys") < order.index("walker")
    assert order.index("arith") < order.index("solver")
    assert placement.specs["walker"].server_urls["keys"] == launch.urls["keys"]


def test_a_reserved_socket_listens_before_its_server_starts_and_is_closed_unused():
    reservations = Reservations()
    url = reservations.reserve("policy")
    assert reservations.reserve("policy") == url  # once per instance
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the kernel queues it until a server accepts
    reservations.close()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return
    raise AssertionError("the unused reserved socket still listens")


def test_the_local_placement_reserves_an_address_per_instance(tmp_path):
    placement = LocalPlacement({}, tmp_path)
    try:
        first, second = placement.reserve("a"), placement.reserve("a@1")
        assert first != second and first.startswith("http://127.0.0.1:")
    finally:
        placement.close()


def test_readiness_is_polled_quickly_at_first_then_backs_off():
    from itertools import islice

    from rollgym.placement.health import poll_pauses

    pauses = list(islice(poll_pauses(), 12))
    assert pauses[0] == 0.005
    assert all(a <= b for a, b in zip(pauses, pauses[1:], strict=False))
    assert pauses[-1] == 0.05 and max(pauses) == 0.05
