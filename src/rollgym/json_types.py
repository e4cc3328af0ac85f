"""JSON as types: the aliases every module uses for bodies, rows and records.

rollgym speaks JSON everywhere (request and response bodies, rollouts.jsonl rows, span
records read back from the trace store). These aliases say so in the type instead of `Any`:
`JsonValue` is anything `json.loads` can return, `JsonObject` one decoded object. They sit
on the ground floor so every layer can name them without importing another's module.

A value rollgym only passes on (never reads) is better typed `object`; a shape rollgym itself
builds and reads has its `TypedDict` next to the code that owns it (the trace store's rows are
in `reading/query_rows.py`, `progress.json` is `driver.progress.ProgressSnapshot`).
"""

from __future__ import annotations

from typing import TypeAlias

#: Anything `json.loads` returns (and `json.dumps` takes without a `default=`).
JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
#: One decoded JSON object: a request body, a row of a .jsonl file, a record.
JsonObject: TypeAlias = "dict[str, JsonValue]"
#: One decoded JSON array.
JsonArray: TypeAlias = "list[JsonValue]"

__all__ = ["JsonArray", "JsonObject", "JsonValue"]
