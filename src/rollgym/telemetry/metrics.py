"""The metric instruments of TELEMETRY.md, and the two recorders that feed them.

Instruments are created once per process from the handle's meter; recorders cache one
attribute dict per dispatch name (and outcome) or destination, so a hot call allocates no new
dicts after the first. Attribute keys are the same constants the spans use, so span metrics
and these metrics join on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from rollgym.telemetry import names

if TYPE_CHECKING:
    import aiohttp

_Attrs = dict[str, str]


class RolloutMetrics:
    """``gym.rollout.*``: completed, reward, duration, in flight, keyed by dispatch name."""

    def __init__(self, meter: Meter) -> None:
        self._completed = meter.create_counter(
            names.METRIC_ROLLOUT_COMPLETED, unit="{rollout}", description="Rollouts finished."
        )
        self._reward = meter.create_histogram(
            names.METRIC_ROLLOUT_REWARD, description="Reward of each finished rollout."
        )
        self._duration = meter.create_histogram(
            names.METRIC_ROLLOUT_DURATION, unit="s", description="Rollout wall time."
        )
        self._in_flight = meter.create_up_down_counter(
            names.METRIC_ROLLOUT_IN_FLIGHT, unit="{rollout}", description="Rollouts in flight."
        )
        self._by_name: dict[str, _Attrs] = {}
        self._by_outcome: dict[tuple[str, str], _Attrs] = {}

    def _name_attrs(self, dispatch_name: str) -> _Attrs:
        attrs = self._by_name.get(dispatch_name)
        if attrs is None:
            attrs = self._by_name[dispatch_name] = {names.DISPATCH_NAME: dispatch_name}
        return attrs

    def _outcome_attrs(self, dispatch_name: str, outcome: str) -> _Attrs:
        key = (dispatch_name, outcome)
        attrs = self._by_outcome.get(key)
        if attrs is None:
            attrs = self._by_outcome[key] = {
                names.DISPATCH_NAME: dispatch_name,
                names.ROLLOUT_OUTCOME: outcome,
            }
        return attrs

    def started(self, dispatch_name: str) -> None:
        """A rollout was dispatched (counts it in flight)."""
        self._in_flight.add(1, self._name_attrs(dispatch_name))

    def finished(
        self, dispatch_name: str, outcome: str, reward: float | None, duration_s: float
    ) -> None:
        """A rollout ended with ``outcome``; its reward is recorded only when it has one."""
        name_attrs = self._name_attrs(dispatch_name)
        outcome_attrs = self._outcome_attrs(dispatch_name, outcome)
        self._in_flight.add(-1, name_attrs)
        self._completed.add(1, outcome_attrs)
        self._duration.record(duration_s, outcome_attrs)
        if reward is not None:
            self._reward.record(reward, name_attrs)


class HttpClientMetrics:
    """``gym.http.client.*``: requests holding a connection, and time waiting for one.

    :class:`~rollgym.http.client.HttpClient` calls :meth:`request_started` /
    :meth:`request_finished` around each request and installs :meth:`trace_config`, passing
    ``trace_request_ctx={"destination": ..., "started": <time.monotonic()>}`` so the aiohttp
    hooks know where the request goes and when it started. Queue duration is the time from the
    request's start until aiohttp has a connection for it (a reused pooled one, or a newly
    created one).
    """

    def __init__(self, meter: Meter) -> None:
        self._connections = meter.create_up_down_counter(
            names.METRIC_HTTP_CLIENT_CONNECTIONS,
            unit="{connection}",
            description="Requests holding a pooled connection, by destination server.",
        )
        self._queue = meter.create_histogram(
            names.METRIC_HTTP_CLIENT_QUEUE_DURATION,
            unit="s",
            description="Time a request waited for a pooled connection.",
        )
        self._by_dest: dict[str, _Attrs] = {}

    def _attrs(self, destination: str) -> _Attrs:
        attrs = self._by_dest.get(destination)
        if attrs is None:
            attrs = self._by_dest[destination] = {names.DESTINATION_SERVER_NAME: destination}
        return attrs

    def request_started(self, destination: str) -> None:
        self._connections.add(1, self._attrs(destination))

    def request_finished(self, destination: str) -> None:
        self._connections.add(-1, self._attrs(destination))

    def trace_config(self) -> aiohttp.TraceConfig:
        """aiohttp hooks measuring the wait for a connection; one per client, made at start-up."""
        import aiohttp

        config = aiohttp.TraceConfig()

        async def on_connection(_s: object, ctx: SimpleNamespace, _p: object) -> None:
            self._record_wait(ctx)

        config.on_connection_reuseconn.append(on_connection)
        config.on_connection_create_end.append(on_connection)
        return config

    def connection_wait(self, destination: str, seconds: float) -> None:
        """The same wait, for a request the client sent without aiohttp (``http/lean.py``)."""
        self._queue.record(max(0.0, seconds), self._attrs(destination))

    def _record_wait(self, ctx: SimpleNamespace) -> None:
        request_ctx = getattr(ctx, "trace_request_ctx", None)
        if not isinstance(request_ctx, dict):
            return
        destination = request_ctx.get("destination")
        started = request_ctx.get("started")
        if isinstance(destination, str) and isinstance(started, float):
            self._queue.record(max(0.0, time.monotonic() - started), self._attrs(destination))


class SandboxMetrics:
    """``gym.sandbox.*``: the warm pool's size and waiters (observed) and exec durations."""

    def __init__(self, meter: Meter, ready: Callable[[], int], waiting: Callable[[], int]) -> None:
        self._duration = meter.create_histogram(
            names.METRIC_SANDBOX_EXEC_DURATION, unit="s", description="Sandbox exec wall time."
        )

        def observe_size(_options: CallbackOptions) -> list[Observation]:
            return [Observation(ready())]

        def observe_waiting(_options: CallbackOptions) -> list[Observation]:
            return [Observation(waiting())]

        meter.create_observable_gauge(
            names.METRIC_SANDBOX_POOL_SIZE,
            [observe_size],
            unit="{sandbox}",
            description="Sandboxes ready in the warm pool.",
        )
        meter.create_observable_gauge(
            names.METRIC_SANDBOX_POOL_WAITING,
            [observe_waiting],
            unit="{rollout}",
            description="Rollouts waiting for a sandbox (the pool is at its maximum).",
        )

    def exec_finished(self, wall_s: float) -> None:
        self._duration.record(wall_s)


def register_dropped_spans(meter: Meter, read: Callable[[], Iterable[tuple[str, int]]]) -> None:
    """``gym.telemetry.spans.dropped{reason}``, observed from the processor's own tallies.

    Observed rather than added on the span path, so ending a span never touches a meter.
    """
    attrs: dict[str, dict[str, str]] = {}

    def observe(_options: CallbackOptions) -> list[Observation]:
        out = []
        for reason, count in read():
            a = attrs.get(reason)
            if a is None:
                a = attrs[reason] = {names.TELEMETRY_DROP_REASON: reason}
            out.append(Observation(count, a))
        return out

    meter.create_observable_counter(
        names.METRIC_SPANS_DROPPED,
        callbacks=[observe],
        unit="{span}",
        description="Spans dropped before export, by reason.",
    )
