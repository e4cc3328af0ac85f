"""The Parquet export's typed sampling columns: one per parameter, as the row fills them."""

from __future__ import annotations

import pytest

from rollgym.reading.export import _schema, export_row


def test_typed_sampling_columns_hold_the_first_model_calls_parameters() -> None:
    pa = pytest.importorskip("pyarrow")
    params = {"temperature": 1, "top_p": 0.9, "max_tokens": 64, "seed": "7", "logprobs": True}
    record = {"rollout_id": "0-0", "trajectory": {"turns": [{"type": "model", "params": params}]}}
    schema = _schema(pa)
    table = pa.Table.from_pylist([export_row(record, "run-1")], schema=schema)
    columns = ["sampling", "temperature", "top_p", "max_tokens", "seed", "cached_tokens"]
    start = schema.names.index("sampling")
    assert schema.names[start : start + len(columns)] == columns
    assert [schema.field(name).type for name in columns[1:5]] == [
        pa.float64(),
        pa.float64(),
        pa.int64(),
        pa.int64(),
    ]
    row = table.to_pylist()[0]
    # an int temperature is widened; a seed that is not a number is null, not a string
    assert (row["temperature"], row["top_p"], row["max_tokens"], row["seed"]) == (
        1.0,
        0.9,
        64,
        None,
    )
