"""Tracing into an embedder's own tracer provider: a trainer using the library API.

A trainer (the NeMo RL case of the design discussion) sets its own global SDK tracer provider
and opens its own spans; it never calls rollgym's telemetry setup. The gate's rule still holds
there, with the embedder's provider as the exporter: a group's spans exist when the group is
enabled **and** that provider records. The API's default (proxy or no-op) provider does not
record, so a trainer without tracing keeps every gate closed and pays nothing.

rollgym only takes a tracer from such a provider: it never replaces it, never shuts it down,
and gives the gate back as it found it when the :class:`~rollgym.Collector` closes.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import trace

from rollgym.telemetry._state import state, tracer_of
from rollgym.telemetry.groups import SpanGroup, configure_gate, gate, resolve_groups

__all__ = ["CallerTracing", "caller_provider", "records"]


def records(provider: object) -> bool:
    """Whether spans started from ``provider`` can be recorded.

    False for the API's defaults (the proxy before any provider is set, the no-op provider)
    and for an SDK provider switched off by ``OTEL_SDK_DISABLED``.
    """
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return False
    return not getattr(provider, "_disabled", False)


def caller_provider() -> trace.TracerProvider | None:
    """The process's global provider when an embedder set it and it records, else None."""
    provider = trace.get_tracer_provider()
    if provider in state.created or not records(provider):
        return None
    return provider


class _Adopted:
    """The one adoption of an embedder's provider in this process, shared by open Collectors."""

    holders = 0
    saved: tuple[trace.Tracer, object | None] | None = None


class CallerTracing:
    """Opens the gate onto the embedder's provider while held, then restores what it found.

    Does nothing when rollgym's own telemetry is set up in this process (``rollgym run``, a
    launched server, a test's in-memory provider) or when no recording provider of the
    embedder's is installed. Collectors open at the same time share one adoption (the first
    one's groups); the last to close gives the gate back.
    """

    __slots__ = ("_groups", "_holding")

    def __init__(self, groups: str | Iterable[str] = "default") -> None:
        self._groups: frozenset[SpanGroup] = resolve_groups(groups)
        self._holding = False

    def start(self) -> bool:
        """Trace into the embedder's provider; True when this instance holds the adoption."""
        if self._holding:
            return True
        if _Adopted.holders == 0:
            if gate.tracing:
                return False
            provider = caller_provider()
            if provider is None:
                return False
            _Adopted.saved = (state.tracer, state.provider)
            state.tracer = tracer_of(provider)
            state.provider = provider
            configure_gate(self._groups, tracing_active=True)
        _Adopted.holders += 1
        self._holding = True
        return True

    def stop(self) -> None:
        """Release the adoption; the last holder closes the gate and restores the tracer."""
        if not self._holding:
            return
        self._holding = False
        _Adopted.holders -= 1
        if _Adopted.holders == 0 and _Adopted.saved is not None:
            state.tracer, state.provider = _Adopted.saved
            _Adopted.saved = None
            configure_gate((), tracing_active=False)
