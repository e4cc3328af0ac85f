"""Trace context across Ray, passed explicitly: the caller injects, the callee attaches.

Why explicit: a Ray actor is a long-lived process of its own, and a task may run on any node;
OpenTelemetry's context is a ``contextvars`` value of the caller's thread, which never travels
with a Ray call. So the caller's context goes along as a small W3C carrier dict (``traceparent``,
``tracestate``, ``baggage``) in a keyword argument, and the callee attaches it for exactly the
duration of the call, then detaches it, so nothing leaks into the next call the worker serves.

Caller side::

    ref = remote_with_context(actor.work, 1, 2)      # == actor.work.remote(1, 2, trace_carrier=...)

Callee side (an actor method or a remote function)::

    @in_context
    def work(self, a, b): ...                        # spans opened here join the caller's trace

Neither side imports Ray: they work with anything that has ``.remote``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from rollgym.telemetry.context import (
    attach_context,
    current_carrier,
    detach_context,
    extract_context,
)

CARRIER_KWARG = "trace_carrier"
_F = TypeVar("_F", bound=Callable[..., object])
_R = TypeVar("_R", covariant=True)


class RemoteCallable(Protocol[_R]):
    """An actor method handle or a remote function: what has ``.remote`` (Ray's own classes
    are untyped, so this names the one call rollgym makes on them)."""

    def remote(self, *args: object, **kwargs: object) -> _R: ...


def remote_with_context(method: RemoteCallable[_R], *args: object, **kwargs: object) -> _R:
    """``method.remote(*args, **kwargs)`` with the caller's trace context as ``trace_carrier``.

    ``method`` is an actor method handle or a remote function whose Python function is wrapped
    by :func:`in_context`. Returns what ``.remote`` returns (an ``ObjectRef``). With no span
    current the carrier is empty and the callee runs in no trace.
    """
    return method.remote(*args, **{CARRIER_KWARG: current_carrier()}, **kwargs)


def in_context(func: _F) -> _F:
    """Run ``func`` with the context of the ``trace_carrier`` keyword attached, then detach it.

    Adds a keyword-only ``trace_carrier`` parameter (default None: no context) to ``func``'s
    signature, which is what Ray checks the arguments of a call against.
    """
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(
            *args: object, trace_carrier: Mapping[str, str] | None = None, **kw: object
        ) -> object:
            token = attach_context(extract_context(trace_carrier)) if trace_carrier else None
            try:
                return await func(*args, **kw)
            finally:
                detach_context(token)

        wrapper: Callable[..., object] = run_async
    else:

        @functools.wraps(func)
        def run(
            *args: object, trace_carrier: Mapping[str, str] | None = None, **kw: object
        ) -> object:
            token = attach_context(extract_context(trace_carrier)) if trace_carrier else None
            try:
                return func(*args, **kw)
            finally:
                detach_context(token)

        wrapper = run
    wrapper.__signature__ = _with_carrier(inspect.signature(func))  # type: ignore[attr-defined]
    # Ray reads an actor method's signature after ``inspect.unwrap``: stop it at the wrapper,
    # or it would reject ``trace_carrier`` as an unexpected argument.
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _with_carrier(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` plus ``trace_carrier=None`` as a keyword-only parameter."""
    params = list(signature.parameters.values())
    carrier = inspect.Parameter(CARRIER_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next(
        (i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params)
    )
    return signature.replace(parameters=[*params[:at], carrier, *params[at:]])
