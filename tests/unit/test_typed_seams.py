"""The small typed pieces the seams are made of: they behave as the code around them expects."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from rollgym.driver.outcomes import RolloutFailure, RolloutResult
from rollgym.driver.rows import Rollout, TaskRow, Unroutable, expand
from rollgym.errors import ERROR_KINDS, InvariantBroken, RollgymError
from rollgym.event_loop import cancel_and_wait
from rollgym.records import fields_record
from rollgym.server_urls import ServerUrls

SRC = Path(__file__).resolve().parents[2] / "src" / "rollgym"


def test_server_urls_is_a_plain_map_that_also_knows_the_replicas() -> None:
    urls = ServerUrls(
        {"a": "http://x:1", "b": "http://y:2"}, replicas={"a": ["http://x:1", "http://x:3"]}
    )
    assert dict(urls) == {"a": "http://x:1", "b": "http://y:2"}
    assert urls.replicas_of("a") == ["http://x:1", "http://x:3"]
    assert urls.replicas_of("b") == ["http://y:2"]
    assert ServerUrls({"c": "http://z:4"}).replicas == {}
    with pytest.raises(KeyError):
        urls.replicas_of("missing")


def test_fields_record_keeps_field_order_and_leaves_out_what_is_named() -> None:
    @dataclass
    class Sample:
        first: int
        second: str
        third: list[int]

    sample = Sample(1, "two", [3])
    assert list(fields_record(sample)) == ["first", "second", "third"]
    assert fields_record(sample, leave_out=("second",)) == {"first": 1, "third": [3]}
    assert fields_record(sample)["third"] is sample.third  # not copied


def test_failure_and_trajectory_lines_keep_their_keys_in_order() -> None:
    failure = RolloutFailure("r", 1, 2, 0, "agent", "timeout", "late", 3, "t" * 32, False)
    assert list(failure.to_record()) == [
        "rollout_id", "task_index", "rollout_index", "attempt", "dispatch_name",
        "error_kind", "message", "line", "trace_id", "trace_sampled",
    ]  # fmt: skip
    result = RolloutResult(
        "r", 1, 2, 0, "agent", 1.0, 0.5, None, 10.0, 10.5, {"reward": 1.0},
        trajectory={"turns": []}, usage={"input_tokens": 3},
    )  # fmt: skip
    line = result.trajectory_record()
    assert list(line) == [
        "rollout_id", "task_index", "rollout_index", "attempt", "dispatch_name", "reward",
        "usage", "trajectory",
    ]  # fmt: skip
    assert line["trajectory"] == {"turns": []} and line["usage"] == {"input_tokens": 3}
    bare = RolloutResult("r", 1, 2, 0, "agent", 1.0, 0.5, None, 10.0, 10.5, {"reward": 1.0})
    assert "usage" not in bare.trajectory_record()


def test_every_failure_kind_written_in_src_is_in_the_vocabulary() -> None:
    import re

    written = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        written |= set(re.findall(r'kind="([a-z0-9_]+)"', text))
        written |= set(re.findall(r'Unroutable\(\s*"([a-z0-9_]+)"', text))
    written -= {"answer", "verify"}  # conversation.py: message kinds, not failures
    assert written and written <= ERROR_KINDS, sorted(written - ERROR_KINDS)


def test_an_unroutable_row_without_a_reason_is_a_named_error_not_an_assert() -> None:
    entry = TaskRow(4, 5, {}, None, None)
    with pytest.raises(InvariantBroken, match="task 4 \\(line 5\\)"):
        list(expand(entry, 1))
    with pytest.raises(InvariantBroken, match="no target"):
        _ = Rollout(entry, 0).target
    assert issubclass(InvariantBroken, RollgymError)
    failures = list(expand(TaskRow(4, 5, {}, None, None, Unroutable("unknown_agent", "m")), 2))
    assert [(f.error_kind, f.message) for f in failures] == [("unknown_agent", "m")] * 2


async def test_cancel_and_wait_stops_the_task_and_ignores_none() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    task = asyncio.get_running_loop().create_task(forever())
    await started.wait()
    await cancel_and_wait(task)
    assert task.cancelled()
    await cancel_and_wait(None)
