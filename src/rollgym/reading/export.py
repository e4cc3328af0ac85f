"""``rollgym export RUN --format parquet``: a run's trajectories as one table a trainer reads.

One row per finished rollout, plain columns (``datasets.load_dataset("parquet", ...)`` reads
them as they are): ``run_id``, ``rollout_id``, ``group_id`` (the task index: the rollouts of one task row
form the group of group-relative methods), ``task_index``, ``rollout_index``, ``attempt``,
``dispatch_name``, ``reward``, ``prompt_ids``, ``completion_ids``, ``logprobs``, ``loss_mask``,
``top_tokens``, ``top_logprobs`` (per completion token, the alternatives when the run asked
for ``top_logprobs``), ``has_tokens``, ``prefix_ok`` (null without tokens), ``model_calls``, ``prompt_tokens``,
``completion_tokens``, and the text: ``messages`` (the whole conversation, then the final
answer: role, content, tool calls as JSON), ``completion_text``, ``finish_reason``,
``truncated`` (the last call stopped at its length limit), ``model``, ``sampling`` (JSON) with
typed ``temperature``, ``top_p``, ``max_tokens``, ``seed``; from the rollout's ``usage``: ``cached_tokens`` (null where the
engine did not say), ``model_s`` (seconds the rollout waited on model calls), ``engine_s``
(the engine's own seconds, as the model server reported them) and ``sandbox_s`` (seconds
waited on sandbox execs; null where no sandbox ran).
docs/trajectories.md lists them.

Memory stays bounded: lines are streamed and written in row groups of ``batch_rows``. Only
committed trajectories are read (:func:`~rollgym.reading.run_reader.committed_trajectories`).
``certified_only`` keeps only the rollouts :mod:`rollgym.reading.certify` finds no violation in.
The table is written under a temporary name beside the output and renamed only once it is
whole, so an export that fails leaves no file (and never a half or empty table) behind.
pyarrow is imported only here (the ``parquet`` extra).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rollgym.driver.output import TRAJECTORIES
from rollgym.errors import ExportError as ExportError
from rollgym.reading.certify import Certifier, certifier_for
from rollgym.reading.run_reader import UnreadableLine, committed_trajectories, recorded_run_id
from rollgym.trajectory.conversation import (
    completion_text,
    finish_reason,
    full_messages,
    message_text,
)
from rollgym.trajectory.record import TOKEN_REQUEST_FIELDS
from rollgym.trajectory.tokens import token_sequence

DEFAULT_NAME = "trajectories.parquet"


#: Sampling parameters that get a typed column of their own (the rest are in ``sampling``).
_TYPED_SAMPLING = {"temperature": float, "top_p": float, "max_tokens": int, "seed": int}


def _message_row(message: Mapping[str, object]) -> dict[str, object]:
    """One message as the ``messages`` column holds it: role and text, tool calls as JSON."""
    calls = message.get("tool_calls")
    return {
        "role": str(message.get("role", "")),
        "content": message_text(message),
        "tool_calls": orjson.dumps(calls).decode() if calls else None,
        "tool_call_id": message.get("tool_call_id"),
        "name": message.get("name"),
    }


def _first_model_turn(trajectory: Mapping[str, object]) -> dict[str, object]:
    turns = trajectory.get("turns")
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict) and turn.get("type") == "model":
            return turn
    return {}


def _sampling(turn: Mapping[str, object]) -> dict[str, object]:
    """The sampling parameters of a model call: its params less the token-capture fields."""
    params = turn.get("params")
    if not isinstance(params, dict):
        return {}
    return {k: v for k, v in params.items() if k not in TOKEN_REQUEST_FIELDS}


def _typed(sampling: Mapping[str, object], key: str) -> object:
    value = sampling.get(key)
    wanted = _TYPED_SAMPLING[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return wanted(value) if wanted is float or isinstance(value, int) else None


def export_row(record: dict[str, Any], run_id: str | None = None) -> dict[str, object]:
    """One table row of one ``trajectories.jsonl`` line."""
    trajectory = record.get("trajectory") or {}
    sequence = token_sequence(trajectory)
    usage = trajectory.get("usage") or {}
    first = _first_model_turn(trajectory)
    sampling = _sampling(first)
    reason = finish_reason(trajectory)
    rollout_usage = record.get("usage") or {}
    return {
        "run_id": run_id,
        "rollout_id": record.get("rollout_id"),
        "group_id": record.get("task_index"),
        "task_index": record.get("task_index"),
        "rollout_index": record.get("rollout_index"),
        "attempt": record.get("attempt"),
        "dispatch_name": record.get("dispatch_name"),
        "reward": record.get("reward"),
        "prompt_ids": sequence.prompt_ids if sequence else [],
        "completion_ids": sequence.completion_ids if sequence else [],
        "logprobs": sequence.logprobs if sequence else [],
        "loss_mask": sequence.loss_mask if sequence else [],
        "top_tokens": sequence.top_tokens if sequence else [],
        "top_logprobs": sequence.top_logprobs if sequence else [],
        "has_tokens": sequence is not None,
        # only a token sequence can extend or not: null where the run kept no tokens
        "prefix_ok": sequence.prefix_ok if sequence else None,
        "model_calls": trajectory.get("model_calls", 0),
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
        "messages": [_message_row(m) for m in full_messages(trajectory)],
        "completion_text": completion_text(trajectory),
        "finish_reason": reason,
        "truncated": reason == "length",
        "model": first.get("model") if isinstance(first.get("model"), str) else None,
        "sampling": orjson.dumps(sampling, option=orjson.OPT_SORT_KEYS).decode(),
        **{key: _typed(sampling, key) for key in _TYPED_SAMPLING},
        "cached_tokens": rollout_usage.get("cached_tokens"),
        "model_s": rollout_usage.get("model_s"),
        "engine_s": rollout_usage.get("engine_s"),
        "sandbox_s": rollout_usage.get("sandbox_s"),
        "policy_versions": _as_text(record.get("policy_versions")),
        "policy_lag": record.get("policy_lag"),
        "token_policy_versions": sequence.token_versions if sequence else [],
    }


def _as_text(versions: object) -> list[str]:
    """Versions as text (a version is an int or a label; one column type holds both)."""
    return [str(v) for v in versions] if isinstance(versions, list) else []


def _schema(pa: Any) -> Any:
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("run_id", pa.string()),
            ("rollout_id", pa.string()),
            ("group_id", pa.int64()),
            ("task_index", pa.int64()),
            ("rollout_index", pa.int64()),
            ("attempt", pa.int64()),
            ("dispatch_name", pa.string()),
            ("reward", pa.float64()),
            ("prompt_ids", pa.list_(pa.int64())),
            ("completion_ids", pa.list_(pa.int64())),
            ("logprobs", pa.list_(pa.float64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("top_tokens", pa.list_(pa.list_(pa.string()))),
            ("top_logprobs", pa.list_(pa.list_(pa.float64()))),
            ("has_tokens", pa.bool_()),
            ("prefix_ok", pa.bool_()),
            ("model_calls", pa.int64()),
            ("prompt_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("messages", pa.list_(message)),
            ("completion_text", pa.string()),
            ("finish_reason", pa.string()),
            ("truncated", pa.bool_()),
            ("model", pa.string()),
            ("sampling", pa.string()),
            # one column per typed sampling parameter, typed and ordered as the row fills them
            *(
                (key, pa.float64() if kind is float else pa.int64())
                for key, kind in _TYPED_SAMPLING.items()
            ),
            ("cached_tokens", pa.int64()),
            ("model_s", pa.float64()),
            ("engine_s", pa.float64()),
            ("sandbox_s", pa.float64()),
            ("policy_versions", pa.list_(pa.string())),
            ("policy_lag", pa.int64()),
            ("token_policy_versions", pa.list_(pa.string())),
        ]
    )


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the file, its rows, and the rollouts it left out as uncertified."""

    path: Path
    rows: int
    left_out: int = 0


def _trajectory_lines(run_dir: Path) -> Iterator[dict[str, Any]]:
    path = run_dir / TRAJECTORIES
    if not path.exists():
        raise ExportError(
            f"{path} does not exist: run with run.trajectories=true or run.capture_tokens=true"
        )
    try:
        yield from committed_trajectories(run_dir)
    except UnreadableLine as exc:
        raise ExportError(str(exc)) from None


def _certifier(run_dir: Path) -> Certifier:
    """The data check of the run (its trace store read where it has one)."""
    from rollgym.tracestore.store import connect_readonly

    store = run_dir / "traces.db"
    if not store.is_file():
        return certifier_for(run_dir, None)[0]
    try:
        with closing(connect_readonly(store)) as conn:
            return certifier_for(run_dir, conn)[0]
    except sqlite3.DatabaseError as exc:
        raise ExportError(f"{store}: not a readable trace store ({exc})") from None


def export_parquet(
    run_dir: Path,
    output: Path | None = None,
    *,
    batch_rows: int = 1024,
    certified_only: bool = False,
) -> Exported:
    """Write the run's trajectories as Parquet (with ``certified_only``, only the rollouts
    that pass ``rollgym traces check --data``); the file appears only once whole."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(
            "the Parquet export needs pyarrow: pip install 'rollgym[parquet]'"
        ) from None
    output = output or run_dir / DEFAULT_NAME
    if not output.parent.is_dir():
        raise ExportError(f"{output.parent}: no such directory to write {output.name} in")
    certifier = _certifier(run_dir) if certified_only else None
    schema = _schema(pa)
    rows = left_out = 0
    batch: list[dict[str, object]] = []
    run_id = recorded_run_id(run_dir)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        with pq.ParquetWriter(partial, schema) as writer:
            for record in _trajectory_lines(run_dir):
                if certifier is not None and certifier.check(record):
                    left_out += 1
                    continue
                batch.append(export_row(record, run_id))
                if len(batch) >= batch_rows:
                    writer.write_table(_table(pa, batch, schema))
                    rows += len(batch)
                    batch.clear()
            if batch or rows == 0:
                writer.write_table(_table(pa, batch, schema))
                rows += len(batch)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return Exported(output, rows, left_out)


def _table(pa: Any, batch: list[dict[str, object]], schema: Any) -> Any:
    """One row group; a value the column's type refuses is one line naming the rollout."""
    try:
        return pa.Table.from_pylist(batch, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        for row in batch:  # find the row that does not fit, to name it
            try:
                pa.Table.from_pylist([row], schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as one:
                raise ExportError(f"rollout {row.get('rollout_id')}: {one}") from None
        raise ExportError(str(exc)) from None
