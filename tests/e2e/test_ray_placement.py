"""``run.placement: ray``: the quickstart servers as Ray actors, the driver unchanged.

Real Ray (a local instance on this machine), real servers inside real actors on 127.0.0.1, the
real driver and trace store. Skipped when the ``ray`` extra is not installed.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

ray = pytest.importorskip("ray")

from e2e_support import traces_check  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

from rollgym.config import JobConfig, load_config  # noqa: E402
from rollgym.driver.job import run_job  # noqa: E402
from rollgym.errors import ConfigError  # noqa: E402
from rollgym.placement.ray import import_ray  # noqa: E402
from rollgym.placement.ray_context import in_context, remote_with_context  # noqa: E402
from rollgym.telemetry.context import current_carrier  # noqa: E402

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
SERVERS = {"policy", "arith", "keys", "solver", "walker"}
#: address="local": always a fresh local Ray, never an earlier one's stale ray_current_cluster.
RAY_INIT = {"address": "local", "num_cpus": 2, "include_dashboard": False, "log_to_driver": False}


@pytest.fixture(autouse=True)
def no_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a cluster these tests did not start: ``RAY_ADDRESS`` would make a plain
    ``ray.init()`` join it (``RAY_INIT`` says ``address="local"`` too; test_ray_hermetic.py
    proves both next to an unrelated cluster)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def local_trace_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* destination: the run exports to its own trace store, servers included."""
    for var in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """An embedder's own Ray: rollgym must use it and leave it running."""
    ray.init(**RAY_INIT)
    try:
        yield
    finally:
        ray.shutdown()


def quickstart_job(tmp_path: Path, *overrides: str) -> JobConfig:
    """The quickstart servers on 30 rollouts: 4 arithmetic, 3 keychain, 3 episode rows x 3."""
    lines = (REPO / "examples" / "quickstart.jsonl").read_text().splitlines()
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(lines[0:4] + lines[50:53] + lines[90:93]) + "\n")
    return load_config(
        QUICKSTART,
        [
            f"run.input={rows}",
            f"run.output_dir={tmp_path / 'out'}",
            "run.placement=ray",
            "run.concurrency=32",
            *overrides,
        ],
    )


def startup_urls(out: Path) -> dict[str, str]:
    """``{server: URL}`` from the run's ``gym.server.startup`` spans."""
    with sqlite3.connect(out / "traces.db") as conn:
        rows = conn.execute("SELECT attributes FROM spans WHERE name = 'gym.server.startup'")
        attrs = [orjson.loads(row[0]) for row in rows]
    return {a["gym.server.name"]: a["gym.server.address"] for a in attrs}


def services_with_spans(out: Path) -> set[str]:
    with sqlite3.connect(out / "traces.db") as conn:
        rows = conn.execute(
            "SELECT DISTINCT r.service_name FROM spans s JOIN resources r ON r.id = s.resource_id"
        )
        return {row[0] for row in rows}


def accepts(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1):
            return True
    except OSError:
        return False


def assert_run_ok(out: Path) -> None:
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["requested"], summary["completed"], summary["failed"]) == (30, 30, 0)
    assert len((out / "rollouts.jsonl").read_bytes().splitlines()) == 30
    # every server exported from inside its actor to the run's trace store
    assert services_with_spans(out) >= SERVERS
    urls = startup_urls(out)
    assert set(urls) == SERVERS
    assert all(urlsplit(url).hostname == "127.0.0.1" for url in urls.values()), urls
    assert not [url for url in urls.values() if accepts(url)], "a server still listens"
    check = traces_check(out)
    assert check.returncode == 0, check.stdout + check.stderr


async def test_job_on_a_local_ray_rollgym_starts_and_stops(
    tmp_path: Path, local_trace_store: None
) -> None:
    if ray.is_initialized():
        ray.shutdown()
    summary = await run_job(quickstart_job(tmp_path))
    assert summary.completed == 30
    assert not ray.is_initialized(), "rollgym started this Ray, so it must shut it down"
    assert_run_ok(tmp_path / "out")


async def test_job_on_the_embedders_ray_kills_every_actor(
    tmp_path: Path, local_trace_store: None, ray_session: None
) -> None:
    config = quickstart_job(tmp_path, "run.run_id=ray-e2e")
    await run_job(config)
    assert ray.is_initialized(), "rollgym must not shut down a Ray it did not start"
    ours = [f"rollgym:ray-e2e:{name}" for name in sorted(SERVERS)]
    deadline = time.monotonic() + 10
    while True:
        alive = {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)}
        if not alive & set(ours) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert not alive & set(ours), f"actors left behind: {sorted(alive & set(ours))}"
    from ray._private import state  # the only API that lists dead actors without a dashboard

    placed = {info["Name"]: info["State"] for info in state.actors().values()}
    assert {name: placed.get(name) for name in ours} == dict.fromkeys(ours, "DEAD")
    assert_run_ok(tmp_path / "out")


async def test_a_broken_setup_in_an_actor_is_the_start_checks_one_line(
    tmp_path: Path, ray_session: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An actor's start check fails (its API key variable is not set): the run ends with the
    same config error as a local server's, naming ``servers.<name>.<key>``."""
    monkeypatch.delenv("ROLLGYM_TEST_UNSET_KEY", raising=False)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "1 + 2"}\n')
    job = tmp_path / "job.yaml"
    job.write_text(
        orjson.dumps(  # JSON is YAML
            {
                "run": {"input": str(rows), "output_dir": str(tmp_path / "out")},
                "servers": {
                    "policy": {
                        "kind": "model",
                        "impl": "openai",
                        "base_url": "http://127.0.0.1:9/v1",
                        "model_name": "upstream-model",
                        "api_key_env": "ROLLGYM_TEST_UNSET_KEY",
                    },
                    "arith": {"kind": "environment", "impl": "arithmetic"},
                    "solver": {
                        "kind": "agent",
                        "impl": "single_turn",
                        "model": "policy",
                        "environment": "arith",
                    },
                },
            }
        ).decode()
    )
    config = load_config(job, ["run.placement=ray", "run.run_id=ray-setup", "run.agent=solver"])
    with pytest.raises(ConfigError) as raised:
        await run_job(config)
    assert str(raised.value) == (
        "servers.policy.api_key_env: environment variable 'ROLLGYM_TEST_UNSET_KEY' is not set "
        "or empty"
    )


def test_remote_with_context_joins_the_callers_trace(ray_session: None) -> None:
    @ray.remote(num_cpus=0)
    class Probe:
        """Opens a span in its own process, with its own tracer; reports where it landed."""

        def __init__(self) -> None:
            self.tracer = TracerProvider().get_tracer("probe")

        @in_context
        def span_ids(self, label: str) -> tuple[str, str, str | None]:
            with self.tracer.start_as_current_span(label) as span:
                parent = span.parent
                return (
                    label,
                    format(span.get_span_context().trace_id, "032x"),
                    format(parent.span_id, "016x") if parent is not None else None,
                )

    probe = Probe.remote()
    tracer = TracerProvider().get_tracer("caller")
    with tracer.start_as_current_span("caller") as caller:
        ours = caller.get_span_context()
        joined = ray.get(remote_with_context(probe.span_ids, "joined"))
        implicit = ray.get(probe.span_ids.remote("implicit"))  # nothing crosses by itself
    assert joined == ("joined", format(ours.trace_id, "032x"), format(ours.span_id, "016x"))
    assert implicit[2] is None and implicit[1] != joined[1]
    ray.kill(probe, no_restart=True)


async def test_in_context_attaches_for_coroutines_and_detaches() -> None:
    tracer = TracerProvider().get_tracer("caller")

    @in_context
    async def inner() -> str | None:
        await asyncio.sleep(0)
        return current_carrier().get("traceparent")

    with tracer.start_as_current_span("caller"):
        carrier = current_carrier()
    assert await inner(trace_carrier=carrier) == carrier["traceparent"]
    assert await inner() is None
    assert current_carrier() == {}


def test_missing_ray_is_a_config_error_naming_run_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError) as caught:
        import_ray()
    assert caught.value.key_path == "run.placement"
    assert "pip install 'rollgym[ray]'" in str(caught.value)
