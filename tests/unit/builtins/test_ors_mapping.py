"""How ORS (openreward) maps onto rollgym: the pure pieces of ``impl: ors`` (rows to tasks,
tools to functions, blocks to text, the event stream as openreward's client reads it). The
whole path (real openreward servers, ``rollgym run``) is tested in
``tests/e2e/test_ors_environment.py``."""

from __future__ import annotations

import asyncio

import pydantic
import pytest

from rollgym.builtins.envs.ors import OrsOptions, _function, _task_of
from rollgym.builtins.envs.ors_wire import OrsError, _events, blocks_text


def test_a_row_is_an_index_in_a_split_or_a_whole_task_spec() -> None:
    assert _task_of({"index": 3}, "train") == {"split": "train", "index": 3}
    assert _task_of({"index": 0, "split": "test", "x": 1}, "train") == {"split": "test", "index": 0}
    assert _task_of({"task_spec": {"secret": 2}}, "train") == {"task_spec": {"secret": 2}}
    for bad in ({}, {"index": -1}, {"index": True}, {"index": "3"}, {"task_spec": [1]}):
        with pytest.raises(ValueError):
            _task_of(bad, "train")


def test_an_ors_tool_is_an_openai_function() -> None:
    schema = {"type": "object", "properties": {"number": {"type": "integer"}}}
    tool = _function({"name": "guess", "description": "Guess.", "input_schema": schema})
    assert tool == {
        "type": "function",
        "function": {"name": "guess", "description": "Guess.", "parameters": schema},
    }
    # a tool without arguments (input_schema None) takes an empty object
    bare = _function({"name": "look", "description": "", "input_schema": None})
    assert bare["function"]["parameters"] == {"type": "object", "properties": {}}


def test_blocks_are_their_text_and_an_image_is_named() -> None:
    blocks = [
        {"type": "text", "text": "hello"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
    ]
    assert blocks_text("prompt", blocks) == "hello\n[image: image/png]"
    with pytest.raises(OrsError, match="prompt: answered off-protocol"):
        blocks_text("prompt", [{"type": "text"}])


def test_the_event_stream_is_read_as_openrewards_client_reads_it() -> None:
    raw = (
        b"event: task_id\r\ndata: abc\r\n\r\n"
        b": ping - 2026-01-01\r\n\r\n"
        b'event: chunk\r\ndata: {"ok": \r\n\r\n'
        b"event: end\r\ndata: true}\r\n\r\n"
    )

    async def read() -> list[tuple[str, str]]:
        stream = asyncio.StreamReader()
        stream.feed_data(raw)
        stream.feed_eof()
        return [e async for e in _events(stream)]  # type: ignore[arg-type]

    assert asyncio.run(read()) == [("task_id", "abc"), ("chunk", '{"ok": '), ("end", "true}")]


def test_exactly_one_place_for_the_environment() -> None:
    with pytest.raises(pydantic.ValidationError, match="exactly one of 'ors_url'"):
        OrsOptions()
    with pytest.raises(pydantic.ValidationError, match="must be an http"):
        OrsOptions(ors_url="localhost:8080")
    assert OrsOptions(ors_environment="m:Env").split == "train"


def test_a_session_never_begun_is_not_counted_closed() -> None:
    """A seed that failed before the server named a session (no ``/create_session`` answer,
    no ``/seed_session`` cookie) has nothing to close: neither close is sent nor counted (the
    environment counts a close only when it answers True or False)."""
    from rollgym.builtins.envs.nemo_gym_wire import ResourcesSession
    from rollgym.builtins.envs.ors_wire import OrsSession

    async def closes() -> tuple[bool | None, bool | None]:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            # a port nothing listens on: a close that went out would answer False, not None
            ors = OrsSession(http, "http://127.0.0.1:9", "guess", 5.0)
            resources = ResourcesSession(http, "http://127.0.0.1:9", 5.0)
            return await ors.close(), await resources.close("")

    assert asyncio.run(closes()) == (None, None)
