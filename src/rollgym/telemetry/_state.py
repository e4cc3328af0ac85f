"""The process's active tracer, held by us rather than looked up globally per span.

OpenTelemetry lets the global tracer provider be set once per process. Holding our own tracer
lets :func:`~rollgym.telemetry.setup.install_for_tests` swap in a provider with an in-memory
exporter per test, while production still sets the global provider once (so third-party
instrumentation joins the same traces). Until setup runs it is the API's proxy tracer, which
follows whatever global provider an embedder installed.
"""

from __future__ import annotations

import weakref

from opentelemetry import trace

from rollgym._version import __version__

INSTRUMENTATION_NAME = "rollgym"
#: The instrumentation scope's version (the package's): backends show it with every span.
INSTRUMENTATION_VERSION = __version__


def tracer_of(provider: trace.TracerProvider) -> trace.Tracer:
    """rollgym's tracer (scope ``rollgym`` with its version) from ``provider``."""
    return provider.get_tracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION)


class _State:
    __slots__ = ("tracer", "provider", "created")

    def __init__(self) -> None:
        self.tracer: trace.Tracer = trace.get_tracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION)
        #: The provider ``tracer`` came from (None: the API's proxy), so only the handle that
        #: installed the current tracer closes the gate when it shuts down.
        self.provider: object | None = None
        #: Providers rollgym built itself; any other global provider belongs to an embedder,
        #: which rollgym traces into but never replaces or shuts down.
        self.created: weakref.WeakSet[object] = weakref.WeakSet()

    def reset(self) -> None:
        """Back to the API's proxy tracer (a handle that installed the current one shut down)."""
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION)
        self.provider = None


state = _State()
