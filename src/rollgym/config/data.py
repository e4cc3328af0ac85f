"""A job config as read, before it is validated: the YAML file, the dotted overrides applied
and relative paths resolved (:func:`read_config`).

Apart from :mod:`rollgym.config.model` because it needs only YAML, not pydantic and the
config's models (about 0.25 s of import and validation on the development machine): the CLI
reads the run's folder and server classes from it and starts the servers' fork server
(:func:`rollgym.placement.forked.start_early_from`) before it validates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from rollgym.config.yaml_reading import load_yaml, unacceptable_character
from rollgym.errors import ConfigError


class ConfigRead(NamedTuple):
    """A config file as read and overridden, not yet validated."""

    #: The YAML's top-level mapping, overrides applied, ``run.input`` and ``run.output_dir``
    #: resolved against the file's folder (an override's against the current directory).
    data: dict[str, Any]
    #: ``{key path: the override that set it}``, to blame an override for its own error.
    overridden: dict[str, str]
    #: The file, as errors name it.
    source: str


def parse_override(text: str) -> tuple[list[str], object]:
    """``run.concurrency=256`` -> (["run", "concurrency"], 256). Values are parsed as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"override {text!r} is not of the form key.path=value", source="<overrides>"
        )
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"the value {raw!r} is not valid YAML: {_yaml_problem(exc)}",
            source=f"override {text}",
            key_path=key,
        ) from None
    return key.split("."), value


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: its problem and the column in the value (the override is
    one line, so PyYAML's multi-line rendering with its ``<unicode string>`` marks says
    nothing more)."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"{unacceptable_character(exc)} at column {exc.position + 1}"
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    if not isinstance(problem, str):
        return " ".join(str(exc).split())
    return f"{problem} at column {mark.column + 1}" if mark is not None else problem


def apply_override(data: dict[str, Any], path: list[str], value: object) -> None:
    node = data
    for depth, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(
                f"cannot set a key below {'.'.join(path[: depth + 1])!r}, which is not a mapping",
                source="<overrides>",
                key_path=".".join(path),
            )
        node = child
    node[path[-1]] = value


def read_config(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> ConfigRead:
    """Read ``path`` and apply ``overrides``; raise ``ConfigError`` (one line naming the
    file, the line or the override) when it cannot be read as a config."""
    source = Path(path)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", source=str(source)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the config as UTF-8",
            source=str(source),
        ) from None
    data = load_yaml(text, str(source))  # duplicate keys refused, errors name the file
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            "the top level must be a mapping with run:, servers:, telemetry:", source=str(source)
        )

    overridden: dict[str, str] = {}
    for item in overrides:
        key_path, value = parse_override(item)
        apply_override(data, key_path, value)
        overridden[".".join(key_path)] = item

    run = data.get("run")
    if isinstance(run, dict):
        for key in ("input", "output_dir"):
            value = run.get(key)
            if isinstance(value, str) and value and f"run.{key}" not in overridden:
                run[key] = (
                    os.path.normpath(source.parent / value) if not os.path.isabs(value) else value
                )
    return ConfigRead(data, overridden, str(source))
