"""Span groups, presets, and the gate every span-only call site reads.

A call site asks one question before it builds a context manager, derives identity or imports
anything: ``if gate.<group>:``. Each flag is precomputed by :func:`configure_gate` as
"this group is enabled **and** a trace exporter is active", so the disabled path is one
attribute load and a branch, and allocates nothing (see ``bench/disabled_site.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final


class SpanGroup(StrEnum):
    """The groups a preset switches on; TELEMETRY.md lists which spans each holds."""

    JOB = "job"  # gym.job and its run-level children
    STARTUP = "startup"  # gym.startup, gym.server.startup
    ROLLOUT = "rollout"  # gym.rollout.dispatch, gym.rollout
    HTTP = "http"  # client and server spans on the cross-process path
    MODEL = "model"  # gym.model.chat, the engine's llm_request
    ENV = "env"  # gym.env.tool, gym.env.seed_session
    VERIFY = "verify"  # gym.verify
    SANDBOX = "sandbox"  # gym.sandbox.create, gym.sandbox.exec, gym.sandbox.destroy


ALL_GROUPS: Final = frozenset(SpanGroup)

#: Presets choose which spans exist, never the trace shape.
PRESETS: Final[dict[str, frozenset[SpanGroup]]] = {
    "default": ALL_GROUPS,
    "per_rollout": ALL_GROUPS - {SpanGroup.JOB, SpanGroup.STARTUP},
    "minimal": frozenset({SpanGroup.ROLLOUT, SpanGroup.HTTP}),
    "off": frozenset(),
}


def resolve_groups(spec: str | Iterable[str]) -> frozenset[SpanGroup]:
    """Turn a preset name or an explicit list of group names into a set of groups.

    Raises ``ValueError`` naming the unknown preset or group (config validation turns it into
    a ``ConfigError`` with the key path).
    """
    if isinstance(spec, str):
        if spec in PRESETS:
            return PRESETS[spec]
        raise ValueError(
            f"unknown preset {spec!r}; expected one of {sorted(PRESETS)} or a list of groups"
        )
    groups = set()
    for name in spec:
        try:
            groups.add(SpanGroup(name))
        except ValueError:
            raise ValueError(
                f"unknown span group {name!r}; expected some of {sorted(g.value for g in SpanGroup)}"
            ) from None
    return frozenset(groups)


class _Gate:
    """Precomputed per-group flags: enabled **and** a trace exporter is active."""

    __slots__ = (
        "job", "startup", "rollout", "http", "model", "env", "verify", "sandbox", "tracing"
    )  # fmt: skip

    def __init__(self) -> None:
        self.tracing = False
        self.job = self.startup = self.rollout = self.http = False
        self.model = self.env = self.verify = self.sandbox = False

    def enabled_groups(self) -> frozenset[SpanGroup]:
        return frozenset(g for g in SpanGroup if getattr(self, g.value))


#: The one gate of this process. All flags are False until telemetry is set up.
gate: Final = _Gate()


def configure_gate(groups: Iterable[SpanGroup], *, tracing_active: bool) -> None:
    """Set every flag of :data:`gate` once, at setup; hot paths only read them."""
    enabled = frozenset(groups)
    gate.tracing = tracing_active
    for group in SpanGroup:
        setattr(gate, group.value, tracing_active and group in enabled)
