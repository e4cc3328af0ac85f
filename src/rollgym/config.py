"""The job config: typed, validated once on load, then frozen.

One YAML file per job, plus dotted overrides from the command line
(``run.concurrency=256``). Everything is checked before any server starts, and every problem
is reported as a :class:`~rollgym.errors.ConfigError` naming the file, the key path and what
was expected. Implementation-specific server options (``max_turns`` of an agent, ``accuracy``
of the simulated model) are validated against that implementation's own ``Options`` model,
and references between servers (an agent's ``model``) must name a server of the right kind.

Secrets are never literals: a config names the environment variable that holds one
(``api_key_env: OPENAI_API_KEY``); :func:`redacted` writes the resolved config with any
secret-looking literal replaced.
"""

from __future__ import annotations

import os
import re
import secrets as _secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from rollgym.collector_options import DEFAULTS as _RUN
from rollgym.collector_options import CollectorOptions
from rollgym.config_data import ConfigRead, read_config
from rollgym.config_data import apply_override as apply_override
from rollgym.config_data import parse_override as parse_override
from rollgym.defaults import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES
from rollgym.errors import ConfigError
from rollgym.json_types import JsonValue
from rollgym.server_options import ServerKind
from rollgym.server_options import (
    ServerOptions as ServerOptions,  # public: implementations import it from here
)
from rollgym.telemetry.config_block import (
    TelemetryConfig as TelemetryConfig,  # public: the ``telemetry:`` block's home is telemetry/
)
from rollgym.urls import redact_text

if TYPE_CHECKING:
    from rollgym.servers.base import Server

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class RunConfig(BaseModel):
    """The ``run:`` block: what to collect and how hard to push."""

    model_config = _FROZEN

    input: Path = Field(description="JSONL file of task rows, one JSON object per line.")
    output_dir: Path | None = Field(None, description="Results folder; default runs/<run id>/.")
    run_id: str | None = Field(
        None, description="Run id; default: kept from output_dir, else generated."
    )
    repeats: int = Field(_RUN.repeats, ge=1, description="Rollouts per task row.")
    concurrency: int = Field(_RUN.concurrency, ge=1, description="Most rollouts in flight at once.")
    max_attempts: int = Field(
        _RUN.max_attempts, ge=1, description="Attempts per rollout (transient failures only)."
    )
    timeout_s: float = Field(
        _RUN.timeout_s, gt=0, description="Time limit of one attempt, in seconds."
    )
    adaptive_window: bool = Field(
        _RUN.adaptive_window,
        description="Send each server only the attempts it answers in good time; the rest "
        "wait unsent, their time limit not started (false: all `concurrency` at once).",
    )
    agent: str | None = Field(None, description="Agent server for rows that name none.")
    environment_routes: dict[str, str] = Field(
        default_factory=dict,
        description="Task set name -> environment server whose /run plays the episode.",
    )
    retry_backoff_s: float = Field(
        _RUN.retry_backoff_s,
        ge=0,
        description="First retry delay; doubles per attempt, with jitter.",
    )
    retry_backoff_max_s: float = Field(
        _RUN.retry_backoff_max_s, ge=0, description="Ceiling of the retry delay."
    )
    pass_threshold: float = Field(
        1.0, description="A rollout passes (for pass@k) when reward >= this."
    )
    retry_failed: bool = Field(
        False, description="On resume, run again the rollouts recorded as failed."
    )
    progress_interval_s: float = Field(
        10.0, gt=0, description="Seconds between plain progress lines."
    )
    max_request_bytes: int = Field(
        MAX_REQUEST_BYTES,
        ge=1024,
        description="Largest request body a server accepts, and the driver sends to an agent.",
    )
    max_response_bytes: int = Field(
        MAX_RESPONSE_BYTES, ge=1024, description="Largest answer the driver reads from an agent."
    )
    trajectories: bool = Field(
        _RUN.trajectories,
        description="Agents return each rollout's turns; written to trajectories.jsonl.",
    )
    capture_tokens: bool = Field(
        _RUN.capture_tokens,
        description="Trajectories also hold the engine's token ids and log-probabilities.",
    )
    max_staleness: int | None = Field(
        _RUN.max_staleness,
        ge=0,
        description="No result may have a model call more than N policy versions behind the "
        "current one: it is run again while attempts remain, else a 'stale' failure.",
    )
    incomplete_model_calls: Literal["retry", "accept"] = Field(
        _RUN.incomplete_model_calls,
        description="A result with a model answer that was not whole (a cut stream, no "
        "finish reason): 'retry' runs it again while attempts remain, then an "
        "'incomplete_model_call' failure; 'accept' keeps it, flagged and counted.",
    )
    policy_version_file: Path | None = Field(
        None,
        description="File holding the current policy version (an int or a label), or a JSON "
        "object {version, weights, probe} naming the checkpoint every model server loads "
        "first; rewritten by the trainer, read again whenever it changes.",
    )
    step: int | str | None = Field(
        None,
        description="The training step (or checkpoint label) this run evaluates: compare "
        "--over step and the viewer's Runs page place the run at it; it changes no rollout.",
    )
    placement: Literal["local", "ray"] = Field(
        "local", description="Launched servers run as local processes, or as Ray actors."
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to join (ray.init(address=...)); default: a local Ray."
    )

    def collector_options(self) -> CollectorOptions:
        """What this block tells the job's :class:`~rollgym.driver.collector.Collector`."""
        return CollectorOptions(
            agent=self.agent,
            environment_routes=self.environment_routes,
            concurrency=self.concurrency,
            max_attempts=self.max_attempts,
            timeout_s=self.timeout_s,
            retry_backoff_s=self.retry_backoff_s,
            retry_backoff_max_s=self.retry_backoff_max_s,
            repeats=self.repeats,
            trajectories=self.trajectories,
            capture_tokens=self.capture_tokens,
            max_request_bytes=self.max_request_bytes,
            max_response_bytes=self.max_response_bytes,
            max_staleness=self.max_staleness,
            adaptive_window=self.adaptive_window,
            incomplete_model_calls=self.incomplete_model_calls,
        )


class RayResources(BaseModel):
    """``servers.<name>.ray``: what each of the server's Ray actors asks the cluster for."""

    model_config = _FROZEN

    num_cpus: float = Field(0, ge=0, description="CPUs each actor reserves (0: none).")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources each actor reserves."
    )
    strategy: Literal["SPREAD", "DEFAULT"] = Field(
        "SPREAD", description="SPREAD: replicas across nodes; DEFAULT: Ray's packing."
    )


class ServerConfig(BaseModel):
    """One entry of ``servers:``. Either ``impl`` (launched by the run) or ``url`` (already up).

    Keys other than ``kind``, ``impl`` and ``url`` are the implementation's options.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: ServerKind
    impl: str | None = Field(None, description="Built-in name or 'package.module:Class'.")
    url: str | None = Field(None, description="Base URL of a server already running elsewhere.")
    restart: int = Field(
        3,
        ge=0,
        description="Times a launched server that dies during the run is restarted (0: never).",
    )
    replicas: int = Field(
        1, ge=1, description="Processes (or Ray actors) serving this server; callers balance."
    )
    ray: RayResources = Field(
        default_factory=RayResources, description="Ray resources per replica (placement: ray)."
    )

    @model_validator(mode="after")
    def _impl_xor_url(self) -> ServerConfig:
        if (self.impl is None) == (self.url is None):
            raise ValueError(
                "give exactly one of 'impl' (launch it) or 'url' (use a running server)"
            )
        for key in ("restart", "replicas", "ray"):
            if self.url is not None and key in self.model_fields_set:
                raise ValueError(f"'{key}' applies to launched servers ('impl'), not to a 'url'")
        if self.url is not None and not re.match(r"^https?://[^/]+", self.url):
            raise ValueError(f"'url' must be an http(s) URL, got {self.url!r}")
        return self

    #: The implementation class and its validated options, once :meth:`implementation` and
    #: :meth:`validated_options` have run: the driver's process resolves each server once.
    _implementation: type[Server] | None = PrivateAttr(None)
    _options_class: type[ServerOptions] | None = PrivateAttr(None)
    _validated_options: ServerOptions | None = PrivateAttr(None)

    @property
    def options(self) -> dict[str, Any]:
        """The implementation-specific keys, as written."""
        return dict(self.model_extra or {})

    def implementation(self) -> type[Server]:
        """The class ``impl`` names, resolved on first use (see :func:`resolve_impl`).

        Raises what :func:`~rollgym.servers.registry.resolve_impl` raises; the config loader
        turns that into a :class:`ConfigError` naming ``servers.<name>.impl``.
        """
        if self._implementation is None:
            from rollgym.servers.registry import resolve_impl

            if self.impl is None:
                raise ValueError("a server given by 'url' has no implementation")
            self._implementation = resolve_impl(self.impl, self.kind)
        return self._implementation

    def options_class(self) -> type[ServerOptions]:
        """The implementation's ``Options`` model, resolved on first use without importing
        the class where the registry names it apart (:func:`resolve_options`): reading a
        config then imports no server stack. Raises what ``resolve_impl`` raises."""
        if self._options_class is None:
            if self._implementation is not None:
                self._options_class = self._implementation.Options
            else:
                from rollgym.servers.registry import resolve_options

                if self.impl is None:
                    raise ValueError("a server given by 'url' has no implementation")
                self._options_class = resolve_options(self.impl, self.kind)
        return self._options_class

    def validated_options(self) -> ServerOptions:
        """The implementation's ``Options`` built from this entry's keys, on first use.

        Raises pydantic's ``ValidationError``; the config loader names the key path.
        """
        if self._validated_options is None:
            self._validated_options = self.options_class().model_validate(self.options)
        return self._validated_options

    def references(self) -> set[str]:
        """The servers this one's options name (``server_refs``): it needs them up first."""
        return {target for _, target, _ in self.validated_options().references()}


class JobConfig(BaseModel):
    """A whole job: ``run``, ``servers``, ``telemetry``."""

    model_config = _FROZEN

    run: RunConfig
    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    def servers_of_kind(self, kind: ServerKind) -> list[str]:
        return [name for name, server in self.servers.items() if server.kind == kind]


def new_run_id() -> str:
    """A sortable, unique-enough run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + _secrets.token_hex(3)


# --- loading ----------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> JobConfig:
    """Read, override, validate and freeze a job config; raise ``ConfigError`` on any problem.

    Relative paths in the file resolve against the file's folder; relative paths given as
    overrides resolve against the current directory.
    """
    return validate_read(read_config(path, overrides))


def validate_read(read: ConfigRead) -> JobConfig:
    """Validate and freeze a config :func:`~rollgym.config_data.read_config` read (the CLI
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
            raise ConfigError(message, source=source, key_path=f"{base}.{key_path}") from None
        for field, target, kind in options.references():
            _check_reference(config, source, f"{base}.{field}", target, kind)


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
