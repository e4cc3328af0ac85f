"""Loading a job config: read, override, validate and freeze it, or say what is wrong.

Everything is checked before any server starts, and every problem is reported as a
:class:`~rollgym.errors.ConfigError` naming the file (or the override), the key path and
what was expected. Secrets are never literals: a config names the environment variable that
holds one (``api_key_env: OPENAI_API_KEY``); :func:`redacted` writes the resolved config with
any secret-looking literal replaced.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

from pydantic import BaseModel, ValidationError

from rollgym.config.data import ConfigRead, read_config
from rollgym.config.model import JobConfig, RunConfig, TelemetryConfig
from rollgym.errors import ConfigError, RenamedOptionWarning
from rollgym.json_types import JsonValue
from rollgym.server_options import ServerKind
from rollgym.urls import redact_text


def load_config(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> JobConfig:
    """Read, override, validate and freeze a job config; raise ``ConfigError`` on any problem.

    Relative paths in the file resolve against the file's folder; relative paths given as
    overrides resolve against the current directory.
    """
    return validate_read(read_config(path, overrides))


def validate_read(read: ConfigRead) -> JobConfig:
    """Validate and freeze a config :func:`~rollgym.config.data.read_config` read (the CLI
    reads first and validates after, so the servers' fork server starts in between)."""
    try:
        return validate_config(read.data, source=read.source)
    except ConfigError as exc:
        raise blame_override(exc, read.overridden) from None


def blame_override(exc: ConfigError, overridden: dict[str, str]) -> ConfigError:
    """The error with the override that set its key as its source (a typo on the command
    line is not the file's fault), or the error itself when no override set that key."""
    for key, item in overridden.items():
        if exc.key_path == key or exc.key_path.startswith(key + "."):
            detail = str(exc).removeprefix(f"{exc.source}: ").removeprefix(f"{exc.key_path}: ")
            return ConfigError(
                detail + _did_you_mean(exc.key_path), source=f"override {item}", key_path=key
            )
    return exc


def _did_you_mean(key_path: str) -> str:
    """`` (did you mean 'concurrency'?)`` for a misspelt key of a known block, else ''."""
    import difflib

    block, _, name = key_path.rpartition(".")
    models: dict[str, type[BaseModel]] = {"run": RunConfig, "telemetry": TelemetryConfig}
    model = models.get(block)
    if model is None:
        return ""
    close = difflib.get_close_matches(name, list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close and close[0] != name else ""


def validate_config(data: dict[str, Any], *, source: str = "<config>") -> JobConfig:
    """Validate a config mapping (already loaded) into a frozen :class:`JobConfig`."""
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error_from(exc, source) from None
    _check_servers(config, source)
    _check_routes(config, source)
    return config


def _config_error_from(exc: ValidationError, source: str) -> ConfigError:
    key_path, message = _describe(exc)
    return ConfigError(message, source=source, key_path=key_path)


def _describe(exc: ValidationError) -> tuple[str, str]:
    """(key path of the first problem, a message naming every problem) of pydantic's errors."""
    problems = []
    for error in exc.errors():
        key_path = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        if error["type"] == "value_error":  # a validator's own words, without pydantic's prefix
            message = message.removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "missing":
            message = "required key is missing"
        got = error.get("input")
        if error["type"] not in ("missing", "extra_forbidden") and not isinstance(got, dict):
            message += f" (got {got!r})"
        problems.append((key_path, message))
    first_key, message = problems[0]
    if len(problems) > 1:
        message += "; also " + "; ".join(f"{k}: {m}" for k, m in problems[1:])
    return first_key, message


def _check_servers(config: JobConfig, source: str) -> None:
    for name, server in config.servers.items():
        base = f"servers.{name}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigError(
                "server names may hold only letters, digits, '_', '.', '-'",
                source=source,
                key_path=base,
            )
        if server.url is not None:
            if server.options:
                first = sorted(server.options)[0]
                raise ConfigError(
                    "a server given by 'url' is not launched, so it takes no implementation options",
                    source=source,
                    key_path=f"{base}.{first}",
                )
            continue
        try:
            server.options_class()  # a built-in's class is not imported here (only its options)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(str(exc), source=source, key_path=f"{base}.impl") from None
        try:
            options = server.validated_options()
        except ValidationError as exc:
            key_path, message = _describe(exc)
            where = f"{base}.{key_path}" if key_path else base  # a check of several keys
            raise ConfigError(message, source=source, key_path=where) from None
        for field, target, kind in options.references():
            _check_reference(config, source, f"{base}.{field}", target, kind)
        for old, new in type(options).old_names_in(server.options):
            warnings.warn(
                RenamedOptionWarning(source=source, key_path=f"{base}.{old}", new_name=new),
                stacklevel=2,
            )


def _check_reference(
    config: JobConfig, source: str, key_path: str, target: str, kind: ServerKind
) -> None:
    other = config.servers.get(target)
    if other is None:
        raise ConfigError(
            f"names server {target!r}, which is not in servers: (have {sorted(config.servers)})",
            source=source,
            key_path=key_path,
        )
    if other.kind != kind:
        raise ConfigError(
            f"names server {target!r} of kind {other.kind!r}; "
            f"expected {'an' if kind[0] in 'aeiou' else 'a'} {kind} server",
            source=source,
            key_path=key_path,
        )


def _check_routes(config: JobConfig, source: str) -> None:
    agent = config.run.agent
    if agent is not None:
        server = config.servers.get(agent)
        if server is None or server.kind != "agent":
            raise ConfigError(
                f"names {agent!r}, which is not an agent server (agents: {config.servers_of_kind('agent')})",
                source=source,
                key_path="run.agent",
            )
    for taskset, target in config.run.environment_routes.items():
        server = config.servers.get(target)
        if server is None or server.kind != "environment":
            raise ConfigError(
                f"names {target!r}, which is not an environment server "
                f"(environments: {config.servers_of_kind('environment')})",
                source=source,
                key_path=f"run.environment_routes.{taskset}",
            )


_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)$", re.IGNORECASE)


def redacted(config: JobConfig) -> dict[str, Any]:
    """The resolved config as plain data, with any literal under a secret-looking key hidden.

    Keys ending in ``_env`` name an environment variable and are kept: they are not secrets.
    """

    def entry(key: str, value: JsonValue) -> JsonValue:
        secret = _SECRET_KEY.search(str(key)) and not str(key).endswith("_env")
        return "<redacted>" if secret else scrub(value)

    def scrub(node: JsonValue) -> JsonValue:
        if isinstance(node, dict):
            return {key: entry(key, value) for key, value in node.items()}
        if isinstance(node, list):
            return [scrub(item) for item in node]
        return redact_text(node) if isinstance(node, str) else node  # a URL's user:password

    return {key: entry(key, value) for key, value in config.model_dump(mode="json").items()}
