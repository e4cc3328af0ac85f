"""The Collector's typed options and the one source of every shared default."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackAgent, collect_all

from rollgym import Collector, RolloutFailure, RolloutResult
from rollgym.config import RunConfig, validate_config
from rollgym.config.collector_options import DEFAULTS, CollectorOptions
from rollgym.telemetry.config_block import TelemetryConfig
from rollgym.telemetry.pipeline.in_process import InProcessExport
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.settings import TelemetrySettings


async def test_options_drive_the_collector(agent: LoopbackAgent) -> None:
    options = CollectorOptions(agent="solver", repeats=2, concurrency=3)
    async with Collector({"solver": agent.url}, options=options) as collector:
        outcomes = await collect_all(collector.stream([{"q": 0}]))
    assert sorted(o.rollout_id for o in outcomes) == ["0-0", "0-1"]
    assert all(isinstance(o, RolloutResult) for o in outcomes)
    assert collector.options is options and collector.concurrency == 3


async def test_options_carry_the_retry_policy(agent: LoopbackAgent) -> None:
    async def always_500(body: dict[str, Any]) -> tuple[int, Any]:
        return 500, {"error": "boom"}

    agent.behaviour = always_500
    options = CollectorOptions(agent="solver", max_attempts=2, retry_backoff_s=0.001)
    async with Collector({"solver": agent.url}, options=options) as collector:
        (outcome,) = await collect_all(collector.stream([{"q": 0}]))
    assert isinstance(outcome, RolloutFailure) and outcome.attempt == 1
    assert [b["attempt"] for b in agent.bodies] == [0, 1]


def test_keywords_still_work_and_become_the_options() -> None:
    collector = Collector({"solver": "http://127.0.0.1:9"}, agent="solver", concurrency=5)
    assert collector.options == CollectorOptions(agent="solver", concurrency=5)


def test_options_and_keywords_together_are_refused() -> None:
    with pytest.raises(TypeError, match="either as options= or as keywords"):
        Collector({"a": "http://127.0.0.1:9"}, options=CollectorOptions(), concurrency=5)


def test_bad_options_name_the_problem() -> None:
    with pytest.raises(ValueError, match="agent 'nope' is not in servers"):
        Collector({"a": "http://127.0.0.1:9"}, options=CollectorOptions(agent="nope"))


@pytest.mark.parametrize(
    ("servers", "options", "said"),
    [
        ({"a": "localhost:8001"}, {}, "servers['a']: 'localhost:8001' is not an http(s) URL"),
        ({"a": "http://127.0.0.1:99999"}, {}, "port out of range"),
        ({"a": ""}, {}, "servers['a']: '' is not an http(s) URL"),
        ({"a": "http://u:secret@:8001"}, {}, "'http://REDACTED:REDACTED@:8001' is not an http"),
        ({"a": "http://127.0.0.1:9"}, {"timeout_s": -1.0}, "timeout_s must be above 0"),
        ({"a": "http://127.0.0.1:9"}, {"timeout_s": float("nan")}, "timeout_s must be above 0"),
        ({"a": "http://127.0.0.1:9"}, {"retry_backoff_s": -0.5}, "retry_backoff_s and"),
    ],
)
def test_a_server_url_or_setting_no_rollout_could_use_is_refused_at_once(
    servers: dict[str, str], options: dict[str, Any], said: str
) -> None:
    """Said when the Collector is made, not as a connection error of every rollout after its
    retries (or an attempt that times out before it is sent); a URL's password is not said."""
    with pytest.raises(ValueError) as refused:
        Collector(servers, options=CollectorOptions(**options))
    assert said in str(refused.value) and "secret" not in str(refused.value)


def test_the_run_block_builds_the_collector_options(tmp_path: Path) -> None:
    config = validate_config(
        {
            "run": {
                "input": str(tmp_path / "rows.jsonl"),
                "concurrency": 7,
                "timeout_s": 9.5,
                "trajectories": True,
                "environment_routes": {"ts": "env"},
            },
            "servers": {"env": {"kind": "environment", "url": "http://127.0.0.1:9"}},
        }
    )
    options = config.run.collector_options()
    assert options == dataclasses.replace(
        DEFAULTS,
        concurrency=7,
        timeout_s=9.5,
        trajectories=True,
        environment_routes={"ts": "env"},
    )


def test_the_run_block_defaults_are_the_collectors() -> None:
    """One source: every setting the run block shares with the Collector defaults alike, in
    the config, in CollectorOptions and in the Collector's keywords."""
    keywords = inspect.signature(Collector.__init__).parameters
    for field in dataclasses.fields(CollectorOptions):
        config_default = RunConfig.model_fields[field.name].get_default(call_default_factory=True)
        expected = {} if field.name == "environment_routes" else getattr(DEFAULTS, field.name)
        assert config_default == expected, field.name
        assert keywords[field.name].default == getattr(DEFAULTS, field.name), field.name


def test_span_queue_defaults_have_one_source() -> None:
    """The telemetry block, the resolved settings and both exporter sides agree."""
    block = TelemetryConfig()
    settings = TelemetrySettings()
    names = ("max_queue_size", "max_export_batch_size", "schedule_delay_ms")
    for name in names:
        expected = getattr(block, name)
        assert getattr(settings, name) == expected, name
        for cls in (InProcessExport, SpanShipper):
            assert inspect.signature(cls.__init__).parameters[name].default == expected, name
    assert settings.flush_timeout_s == block.flush_timeout_s
