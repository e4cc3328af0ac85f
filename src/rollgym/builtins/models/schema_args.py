"""Arguments that satisfy a tool's JSON schema, made up deterministically from a seed.

The simulated model calls the tools of environments it knows nothing about, so a new
environment can be played end to end with no real model: each call's arguments are valid for
the schema the environment published (types, ``required``, ``enum``, ``const``, ``default``,
numeric bounds, string and array lengths, nested objects and arrays, ``anyOf``/``oneOf``),
and the same seed gives the same arguments. A string with no other constraint takes a word the
prompt quotes (``'...'`` or ``"..."``), the way a model would take it from the task.
:func:`non_object_arguments` plays the opposite, a mistake real engines make.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from typing import Any

_QUOTED = re.compile(r"'([^'\n]{1,80})'|\"([^\"\n]{1,80})\"")
#: Nesting beyond this gets the smallest valid value (a schema may be recursive).
_MAX_DEPTH = 6


def quoted_words(text: str) -> list[str]:
    """The quoted words of a prompt, in order."""
    return [a or b for a, b in _QUOTED.findall(text)]


def non_object_arguments(rng: random.Random) -> str:
    """Arguments that are JSON but not an object: what vLLM's forced tool calls (``tool_choice:
    required``) were seen to write with a weak model, ``true`` and ``48116.5`` among them."""
    return "true" if rng.random() < 0.5 else f"{rng.uniform(0, 100_000):.1f}"


def arguments_for(
    parameters: Mapping[str, object] | None, rng: random.Random, hints: list[str] | None = None
) -> dict[str, object]:
    """An arguments object valid for ``parameters`` (a tool's JSON schema)."""
    value = _value(parameters or {"type": "object"}, rng, hints or [], 0)
    return value if isinstance(value, dict) else {}


def _value(
    schema: Mapping[str, object], rng: random.Random, hints: list[str], depth: int
) -> object:
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            if key == "allOf":
                merged: dict[str, object] = {}
                for option in usable:
                    merged.update(option)
                return _value(merged, rng, hints, depth + 1)
            return _value(usable[0] if usable else options[0], rng, hints, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    maker = _MAKERS.get(str(kind))
    return maker(schema, rng, hints, depth) if maker is not None else None


def _object(schema: Mapping[str, Any], rng: random.Random, hints: list[str], depth: int) -> object:
    properties = schema.get("properties") or {}
    required = [n for n in schema.get("required") or [] if isinstance(n, str)]
    out: dict[str, object] = {}
    if depth >= _MAX_DEPTH:
        return out
    for name in required:
        sub = properties.get(name)
        out[name] = _value(sub if isinstance(sub, Mapping) else {}, rng, hints, depth + 1)
    return out


def _array(schema: Mapping[str, Any], rng: random.Random, hints: list[str], depth: int) -> object:
    items = schema.get("items")
    count = max(int(schema.get("minItems", 1) or 0), 0 if depth >= _MAX_DEPTH else 1)
    maximum = schema.get("maxItems")
    if isinstance(maximum, int):
        count = min(count, maximum)
    item = items if isinstance(items, Mapping) else {}
    return [_value(item, rng, hints, depth + 1) for _ in range(count)]


def _string(schema: Mapping[str, Any], rng: random.Random, hints: list[str], depth: int) -> object:
    low = int(schema.get("minLength", 0) or 0)
    high = schema.get("maxLength")
    text = hints[0] if hints and "pattern" not in schema else f"v{rng.randrange(16**6):06x}"
    if isinstance(high, int):
        text = text[:high]
    if len(text) < low:
        text = text + "x" * (low - len(text))
    return text


def _integer(
    schema: Mapping[str, object], rng: random.Random, hints: list[str], depth: int
) -> object:
    low, high = _bounds(schema, integer=True)
    return rng.randint(int(low), int(high))


def _number(
    schema: Mapping[str, object], rng: random.Random, hints: list[str], depth: int
) -> object:
    low, high = _bounds(schema, integer=False)
    return round(rng.uniform(low, high), 3) if high > low else low


def _bound(
    schema: Mapping[str, object], inclusive: str, exclusive: str, step: float
) -> float | None:
    value = schema.get(inclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    value = schema.get(exclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) + step
    return None


def _bounds(schema: Mapping[str, object], *, integer: bool) -> tuple[float, float]:
    step = 1.0 if integer else 1e-3
    low = _bound(schema, "minimum", "exclusiveMinimum", step)
    high = _bound(schema, "maximum", "exclusiveMaximum", -step)
    if low is None and high is None:
        low, high = 1.0, 9.0
    elif low is None:
        assert high is not None
        low = min(high, 1.0)
    elif high is None:
        high = low + 8
    if integer:
        low, high = float(math.ceil(low)), float(math.floor(high))
    return low, max(low, high)


def _boolean(
    schema: Mapping[str, object], rng: random.Random, hints: list[str], depth: int
) -> object:
    return True


def _null(schema: Mapping[str, object], rng: random.Random, hints: list[str], depth: int) -> object:
    return None


_MAKERS = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": _boolean,
    "null": _null,
}
