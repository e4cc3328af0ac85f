"""The process's active tracer, held by us rather than looked up globally per span.

OpenTelemetry lets the global tracer provider be set once per process. Holding our own tracer
lets :func:`~rollgym.telemetry.setup.install_for_tests` swap in a provider with an in-memory
exporter per test, while production still sets the global provider once (so third-party
instrumentation joins the same traces). Until setup runs it is the API's proxy tracer, which
follows whatever global provider an embedder installed.
"""

from __future__ import annotations

from opentelemetry import trace

INSTRUMENTATION_NAME = "rollgym"


class _State:
    __slots__ = ("tracer", "provider")

    def __init__(self) -> None:
        self.tracer: trace.Tracer = trace.get_tracer(INSTRUMENTATION_NAME)
        #: The provider ``tracer`` came from (None: the API's proxy), so only the handle that
        #: installed the current tracer closes the gate when it shuts down.
        self.provider: object | None = None


state = _State()
