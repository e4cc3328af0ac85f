"""The job config's model: the ``run:``, ``servers:`` and ``telemetry:`` blocks, frozen.

One YAML file per job (read by :mod:`rollgym.config.data`, validated by
:mod:`rollgym.config.loading`). Implementation-specific server options (``max_turns`` of an
agent, ``accuracy`` of the simulated model) are validated against that implementation's own
``Options`` model, resolved through :mod:`rollgym.servers.registry` on first use, and
references between servers (an agent's ``model``) must name a server of the right kind.

The ``run:`` block's defaults are :class:`~rollgym.config.collector_options.CollectorOptions`'
own, so the library's Collector and a job config cannot disagree; the ``telemetry:`` block is
:class:`~rollgym.telemetry.config_block.TelemetryConfig`, which lives below in telemetry/ (it
validates against telemetry's span groups, and telemetry resolves it without importing this).
"""

from __future__ import annotations

import dataclasses
import secrets as _secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rollgym.config.collector_options import DEFAULTS as _RUN
from rollgym.config.collector_options import CollectorOptions
from rollgym.defaults import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, PASS_THRESHOLD
from rollgym.server_options import ServerKind, check_one_place
from rollgym.server_options import (
    ServerOptions as ServerOptions,  # public: implementations import it from here
)
from rollgym.telemetry.config_block import (
    TelemetryConfig as TelemetryConfig,  # public: the ``telemetry:`` block's home is telemetry/
)

if TYPE_CHECKING:
    from rollgym.servers.base import Server

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class RunConfig(BaseModel):
    """The ``run:`` block: what to collect and how hard to push."""

    model_config = _FROZEN

    input: Path = Field(description="JSONL file of task rows, one JSON object per line.")
    output_dir: Path | None = Field(None, description="Results folder; default runs/<run id>/.")

    @field_validator("input", "output_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        """An empty text is a path to the config's own folder: refused, not taken as one
        (``run.output_dir=`` wrote a run's files beside the config)."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty: give a path")
        return value

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
        PASS_THRESHOLD,
        allow_inf_nan=False,  # nan passes nothing and fails nothing: never what was meant
        description="The reward at or above which a rollout counts as passed: pass@k in "
        "summary.json, and the pass_rate of every launched environment that sets none.",
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
        """What this block tells the job's :class:`~rollgym.driver.collector.Collector`.

        Every field of :class:`CollectorOptions` is a field of this block by the same name
        (``tests/unit/driver/test_collector_options.py`` holds their defaults alike), so the
        value is built by name rather than restated field by field."""
        return CollectorOptions(
            **{
                field.name: getattr(self, field.name)
                for field in dataclasses.fields(CollectorOptions)
            }
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
        check_one_place(self.url, "url", self.impl, "impl", "rollgym launches it")
        for key in ("restart", "replicas", "ray"):
            if self.url is not None and key in self.model_fields_set:
                raise ValueError(f"'{key}' applies to launched servers ('impl'), not to a 'url'")
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

    @model_validator(mode="before")
    @classmethod
    def _one_pass_threshold(cls, data: Any) -> Any:
        """``run.pass_threshold``, when set, is each launched environment's too (unless the
        environment sets its own), so summary.json's pass@k and the environments'
        ``pass_rate`` beside it count the same rollouts as passed."""
        if not isinstance(data, dict):
            return data
        run, servers = data.get("run"), data.get("servers")
        if not (isinstance(run, dict) and "pass_threshold" in run and isinstance(servers, dict)):
            return data
        return {
            **data,
            "servers": {
                name: _with_pass_threshold(entry, run["pass_threshold"])
                for name, entry in servers.items()
            },
        }

    def servers_of_kind(self, kind: ServerKind) -> list[str]:
        return [name for name, server in self.servers.items() if server.kind == kind]


def _with_pass_threshold(entry: object, threshold: object) -> object:
    """A ``servers:`` entry as written, plus ``pass_threshold`` when it is a launched
    environment that sets none (every environment's options have it: EnvironmentOptions)."""
    if (
        isinstance(entry, dict)
        and entry.get("kind") == "environment"
        and "impl" in entry
        and "url" not in entry
        and "pass_threshold" not in entry
    ):
        return {**entry, "pass_threshold": threshold}
    return entry


def new_run_id() -> str:
    """A sortable, unique-enough run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + _secrets.token_hex(3)
