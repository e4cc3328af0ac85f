"""The span encoder's attribute fields: cached by (key, type, value), parsed back by protobuf.

The cache must never hand one value's bytes to another that compares equal (``True == 1 ==
1.0``), must skip what the wire cannot carry without losing the other attributes, and must
encode unhashable values (lists) without caching them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from rollgym.telemetry.pipeline import wire


def _parsed(fields: list[bytes]) -> list[tuple[str, Any]]:
    pairs = []
    for field in fields:
        assert field[0:1] == b"\x4a"
        kv = KeyValue()
        kv.ParseFromString(field[2:] if field[1] < 0x80 else field[3:])
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        if kind == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        pairs.append((kv.key, value))
    return pairs


def test_equal_values_of_other_types_keep_their_own_encoding() -> None:
    for _ in range(2):  # the second pass is served from the cache
        fields = wire.attributes(b"\x4a", {"a": True, "b": 1, "c": 1.0, "d": "1"})
        assert _parsed(fields) == [("a", True), ("b", 1), ("c", 1.0), ("d", "1")]
    kinds = []
    for field in fields:
        kv = KeyValue()
        kv.ParseFromString(field[2:])
        kinds.append(kv.value.WhichOneof("value"))
    assert kinds == ["bool_value", "int_value", "double_value", "string_value"]


def test_lists_are_encoded_and_what_cannot_be_carried_is_skipped_alone() -> None:
    attrs = {"ok": "x", "big": 1 << 70, "tags": ["a", "b"], "map": {"k": 1}, "n": 3}
    for _ in range(2):
        fields = wire.attributes(b"\x4a", attrs)
        assert _parsed(fields) == [("ok", "x"), ("tags", ["a", "b"]), ("n", 3)]


def test_a_long_value_gets_a_multi_byte_length() -> None:
    [field] = wire.attributes(b"\x4a", {"text": "é" * 200})
    assert _parsed([field]) == [("text", "é" * 200)]
