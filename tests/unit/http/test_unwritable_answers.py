"""What a server's JSON answer says when it holds a value JSON cannot hold: where, and what."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rollgym.errors import HTTPError
from rollgym.http.server import OrjsonResponse


def _refusal(content: Any) -> str:
    with pytest.raises(HTTPError) as refused:
        OrjsonResponse(content)
    assert refused.value.status == 500
    return refused.value.message


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ({"a": [1, {2, 3}]}, "holds a set at a[1]"),
        ({"m": {"k": object()}}, "holds an object at m.k"),
        ({"t": "cut \ud800"}, "holds a str at t"),
        ({"ok": 1, (1, 2): "a tuple as a key"}, "holds a tuple at (1, 2)"),
        ([0, 1, 2**70], "holds an int at [2]"),
        ({2}, "holds a set that"),  # the answer itself: no place to name
    ],
)
def test_the_refusal_names_the_place_and_the_type(content: Any, names: str) -> None:
    message = _refusal(content)
    assert message.startswith("the answer " + names), message
    assert "JSON cannot hold (" in message  # orjson's own reason follows


def test_a_nesting_past_orjsons_depth_is_named_in_bounded_words() -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(2000):
        inner["k"] = {}
        inner = inner["k"]
    message = _refusal(deep)
    assert "Recursion limit" in message and len(message) < 400, message


def test_what_json_can_hold_is_written_as_before() -> None:
    np = pytest.importorskip("numpy")
    body = OrjsonResponse({"r": np.float32(0.5), 1: "key", "nan": float("nan")}).body
    assert orjson.loads(body) == {"r": 0.5, "1": "key", "nan": None}
