"""The ``telemetry:`` block of a job config, in the room that resolves it.

:class:`TelemetryConfig` is what a user writes; :mod:`rollgym.telemetry.settings` resolves it
against the ``OTEL_*`` environment. It lives here, below ``config/model.py`` (which embeds it in
``JobConfig`` and re-exports it as ``rollgym.config.TelemetryConfig``), so telemetry never
imports the job config above it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollgym.defaults import (
    SPAN_EXPORT_BATCH_SIZE,
    SPAN_FLUSH_TIMEOUT_S,
    SPAN_QUEUE_SIZE,
    SPAN_SCHEDULE_DELAY_MS,
)
from rollgym.telemetry.content_capture import CAPTURE_MAX_BYTES

_FROZEN = ConfigDict(extra="forbid", frozen=True)


def _split_bind(bind: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` as ``(host, port)``; ValueError when malformed."""
    text = bind.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""  # a bare host or IPv6 address
    if not host:
        raise ValueError(f"expected host[:port], got {bind!r}")
    if not port_text:
        return host, 0
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"expected host[:port] with a port 0-65535, got {bind!r}")
    return host, int(port_text)


class TailSamplingConfig(BaseModel):
    """``telemetry.tail_sampling``: keep a rollout attempt's trace by how it ended
    (:mod:`rollgym.telemetry.sampling_tail`). Every failed, timed-out and stale attempt is
    kept; of the rest, the slow ones, rewards outside the band, and ``share``."""

    model_config = _FROZEN

    share: float = Field(
        0.1, ge=0.0, le=1.0, description="Share of the remaining (ordinary) traces kept."
    )
    slow_percentile: float | None = Field(
        99.0,
        gt=0.0,
        le=100.0,
        description="Keep attempts at or above this percentile of the durations so far "
        "(null: none kept for being slow).",
    )
    reward_band: tuple[float, float] | None = Field(
        None, description="[low, high]: keep rewards outside it (null: none kept for it)."
    )
    window: int = Field(
        1000, ge=1, description="How many recent durations the running percentile holds."
    )
    grace_s: float | None = Field(
        None,
        ge=0.0,
        description="Seconds after its decision a trace is sent to the OTLP backend or removed "
        "from the store (null: twice telemetry.schedule_delay_ms plus 1 s, the time every "
        "process's exporters take to flush it into the store).",
    )

    @field_validator("reward_band")
    @classmethod
    def _ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and value[0] > value[1]:
            raise ValueError(f"expected [low, high] with low <= high, got {list(value)}")
        return value


class TelemetryConfig(BaseModel):
    """The ``telemetry:`` block. A user's ``OTEL_*`` environment variable wins over it."""

    model_config = _FROZEN

    preset: str | list[str] = Field(
        "default", description="default | per_rollout | minimal | off | a list of groups."
    )
    exporter: Literal["auto", "otlp", "console", "none"] = Field(
        "auto", description="auto: OTEL_TRACES_EXPORTER if set, else the run's local trace store."
    )
    endpoint: str | None = Field(
        None, description="OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT wins)."
    )
    protocol: Literal["http/protobuf", "grpc"] = Field(
        "http/protobuf", description="OTLP protocol."
    )
    headers_env: str | None = Field(
        None, description="Env var holding OTLP headers (k=v,k2=v2), e.g. an API key."
    )
    metrics: bool = Field(
        True, description="Export the metrics of TELEMETRY.md with the same exporter."
    )
    single_trace: bool = Field(
        False, description="Give every root the job's trace id (small debugging runs only)."
    )
    sampler: str | None = Field(None, description="Like OTEL_TRACES_SAMPLER (which wins).")
    sampler_arg: str | None = Field(None, description="Like OTEL_TRACES_SAMPLER_ARG (which wins).")
    max_queue_size: int = Field(
        SPAN_QUEUE_SIZE, ge=1, description="Spans buffered per process before dropping."
    )
    max_export_batch_size: int = Field(
        SPAN_EXPORT_BATCH_SIZE,
        ge=1,
        description="Spans per export request (halved after a backend timeout).",
    )
    schedule_delay_ms: int = Field(
        SPAN_SCHEDULE_DELAY_MS, ge=1, description="Longest wait between exports."
    )
    flush_timeout_s: float = Field(
        SPAN_FLUSH_TIMEOUT_S,
        gt=0,
        description="How long each process waits at its end for unsent spans to reach the "
        "backend; what is still unsent then is counted as dropped and reported.",
    )
    require_exporter: bool = Field(
        False,
        description="Stop the run at its start when the chosen OTLP endpoint is unreachable; "
        "by default it goes on, said in one line (its spans wait for the endpoint until the run "
        "ends, then each process stops waiting at once if nothing listens still).",
    )
    capture_content: bool = Field(
        False,
        description="Spans carry content: each tool call's arguments and result, each model "
        "call's input and output messages "
        "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT wins). Content may hold secrets "
        "or personal data: off by default.",
    )
    capture_max_bytes: int = Field(
        CAPTURE_MAX_BYTES,
        ge=1,
        description="Most UTF-8 bytes one captured value keeps; longer ones are cut and end "
        "with '…[truncated]'.",
    )
    tail_sampling: TailSamplingConfig | None = Field(
        None,
        description="Decide each rollout attempt's trace when it ends, from its outcome "
        "(null: off; needs the run's local trace store).",
    )
    store_bind: str | None = Field(
        None,
        description="host[:port] the local trace store listens on (default 127.0.0.1 and a "
        "free port); any other host requires a bearer token, generated per run and printed.",
    )

    @field_validator("store_bind")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is not None:
            _split_bind(value)
        return value

    def store_address(self) -> tuple[str, int]:
        """``store_bind`` as ``(host, port)``; port 0 picks a free one."""
        return _split_bind(self.store_bind) if self.store_bind else ("127.0.0.1", 0)

    @field_validator("preset", mode="before")
    @classmethod
    def _yaml_off_is_a_preset(cls, value: Any) -> Any:
        """YAML reads a bare ``off`` as the boolean false: ``preset: off`` means the preset."""
        return "off" if value is False else value

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | list[str]) -> str | list[str]:
        from rollgym.telemetry.groups import resolve_groups

        resolve_groups(value)
        return value
