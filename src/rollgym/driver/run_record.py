"""What defines a run, recorded in ``run.json`` so a resume can refuse to change it.

The resume ledger is keyed by position (``task_index * repeats + rollout_index``): a resume
that reads another input file, or that writes lines of another shape (tokens or
trajectories captured or not), would skip rollouts it never ran, or mix two kinds of
line in one file, and say "nothing left to run". So the first session records what decides
which rollouts exist and what each line holds, and every later session compares:

- ``input_sha256`` (with ``input``, the path it was read from, for the message): the rows;
- ``repeats``: rollouts per row;
- ``agent`` and ``environment_routes``: which server plays each row (its dispatch name);
- ``trajectories`` and ``capture_tokens``, the run's and any server's own: what each
  rollout line carries.

Anything else (concurrency, retries, timeouts, the servers' addresses, ``retry_failed``) may
change between sessions. A folder written before the record existed has a ``run.json``
without it: that resume goes on and the record is written then, from its config.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollgym.config import JobConfig
from rollgym.errors import ConfigError
from rollgym.records import fields_record

#: run.json key of the record.
RECORD_KEY = "defines"
#: record field -> the config key a person changes to change it (for the message).
_KEYS = {
    "input_sha256": "run.input",
    "repeats": "run.repeats",
    "agent": "run.agent",
    "environment_routes": "run.environment_routes",
    "trajectories": "run.trajectories",
    "capture_tokens": "run.capture_tokens",
    "server_capture": "servers",
}
_CAPTURE_KEYS = ("trajectories", "capture_tokens")


def _server_capture(config: JobConfig) -> dict[str, dict[str, bool]]:
    """The capture options servers set themselves, by server name (most set none)."""
    found: dict[str, dict[str, bool]] = {}
    for name, server in sorted(config.servers.items()):
        options = server.options
        chosen = {key: options[key] for key in _CAPTURE_KEYS if options.get(key) is not None}
        if chosen:
            found[name] = chosen
    return found


def _capture_differences(stored: object, now: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    was_all = stored if isinstance(stored, dict) else {}
    found = []
    for name in sorted(set(was_all) | set(now)):
        was, mine = was_all.get(name) or {}, now.get(name) or {}
        for key in _CAPTURE_KEYS:
            if was.get(key) != mine.get(key):
                path = f"servers.{name}.{key}"
                found.append((path, f"{path} was {was.get(key)!r}, now {mine.get(key)!r}"))
    return found


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file's bytes (streamed)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclass(frozen=True)
class RunRecord:
    """The fields of a run that a resume must keep."""

    input: str
    input_sha256: str
    repeats: int
    agent: str | None
    environment_routes: dict[str, str]
    trajectories: bool
    capture_tokens: bool
    #: a server's own ``trajectories`` / ``capture_tokens`` (an agent's override of the run's)
    server_capture: dict[str, dict[str, bool]]

    @classmethod
    def of(cls, config: JobConfig) -> RunRecord:
        run = config.run
        try:
            digest = file_sha256(run.input)
        except OSError as exc:
            raise ConfigError(
                f"cannot read input file {run.input}: {exc.strerror or exc}", key_path="run.input"
            ) from None
        return cls(
            input=str(run.input),
            input_sha256=digest,
            repeats=run.repeats,
            agent=run.agent,
            environment_routes=dict(sorted(run.environment_routes.items())),
            trajectories=run.trajectories,
            capture_tokens=run.capture_tokens,
            server_capture=_server_capture(config),
        )

    def to_json(self) -> dict[str, Any]:
        """The record as ``run.json`` keeps it: every field."""
        return fields_record(self)

    def differences(self, stored: Mapping[str, object]) -> list[tuple[str, str]]:
        """(config key, what differs) for each recorded field this session would change."""
        mine = self.to_json()
        found = []
        for field, key in _KEYS.items():
            if field not in stored or stored[field] == mine[field]:
                continue
            if field == "input_sha256":
                found.append((key, _input_difference(stored, self)))
            elif field == "server_capture":
                found.extend(_capture_differences(stored[field], self.server_capture))
            else:
                found.append((key, f"{key} was {stored[field]!r}, now {mine[field]!r}"))
        return found


def _input_difference(stored: Mapping[str, object], now: RunRecord) -> str:
    was = f"{stored.get('input')} (sha256 {str(stored['input_sha256'])[:12]})"
    if stored.get("input") == now.input:
        return f"input file {now.input} has changed since the run began: was sha256 " + (
            f"{str(stored['input_sha256'])[:12]}, now {now.input_sha256[:12]}"
        )
    return f"the run read {was}, this input is {now.input} (sha256 {now.input_sha256[:12]})"


def check_resume(
    output_dir: Path, stored_run: Mapping[str, object] | None, record: RunRecord
) -> None:
    """Raise one :class:`ConfigError` naming what a resume would change, or return.

    ``stored_run`` is the folder's ``run.json`` (None: a new run); without a record (a folder
    written before the record existed) there is nothing to compare, so the resume goes on.
    """
    stored = (stored_run or {}).get(RECORD_KEY)
    if not isinstance(stored, dict):
        return
    differences = record.differences(stored)
    if not differences:
        return
    key = differences[0][0]
    what = "; ".join(text for _, text in differences)
    raise ConfigError(
        f"{output_dir} holds a run this command would change ({what}); a resume must keep "
        "them: give another run.output_dir to start a new run",
        key_path=key,
    )


def with_record(run: Mapping[str, object], record: RunRecord) -> dict[str, object] | None:
    """``run.json`` with the record added, or None when it already has one (kept as it is)."""
    if isinstance(run.get(RECORD_KEY), dict):
        return None
    return {**run, RECORD_KEY: record.to_json()}
