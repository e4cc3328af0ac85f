"""The current OpenTelemetry context, read and set in one call where the runtime allows it.

Every span rollgym opens reads the current context once, makes its span current and restores
the context afterwards. Through the API each of those steps is three calls deep
(``context.get_current`` -> the runtime context's ``get_current`` -> ``ContextVar.get``; the
same for ``attach`` and ``detach``), and ``trace.set_span_in_context`` two more
(``set_value``). With the runtime context OpenTelemetry uses unless ``OTEL_PYTHON_CONTEXT``
names another (``ContextVarsRuntimeContext``), those calls end in one ``ContextVar`` whose
``get``, ``set`` and ``reset`` are exactly what the API does; this module makes them directly,
which removes seven Python calls from every span in every rollgym process
(``bench/traced_calls.py``). Under any other runtime context, or an API without that
variable, every function here goes through the API unchanged.

What stays the API's: which context is current (the same variable, so a span a user opens
through ``opentelemetry.trace`` sees rollgym's spans as its parents and the other way round),
and what a context holds (:func:`with_span` builds the same ``Context`` ``set_value`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Final

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import Span


def _current_variable() -> ContextVar[Context] | None:
    """The ``ContextVar`` behind the API's current context, when the runtime is the standard
    one; None otherwise (then every function below calls the API)."""
    runtime = getattr(context_api, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    variable = getattr(runtime, "_current_context", None)
    return variable if isinstance(variable, ContextVar) else None


_CURRENT: Final = _current_variable()
#: The key a span is kept under in a ``Context``, read once through the API.
SPAN_KEY: Final = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))

get_current: Callable[[], Context]
attach: Callable[[Context], Token[Context]]
#: Restores the context a token replaced. Unlike the API's ``detach``, which logs and swallows
#: a failure, the variable's ``reset`` raises it (a token used twice, or in another task's
#: context): every caller guards it and warns once.
detach: Callable[[Token[Context]], None]
if _CURRENT is not None:
    # The variable's own methods, bound once: a call to one is a C call, no Python frame.
    get_current, attach, detach = _CURRENT.get, _CURRENT.set, _CURRENT.reset
else:
    get_current, attach, detach = context_api.get_current, context_api.attach, context_api.detach


def with_span(span: Span, context: Context) -> Context:
    """``trace.set_span_in_context(span, context)``: a copy of ``context`` holding ``span``."""
    values = context.copy()
    values[SPAN_KEY] = span
    return Context(values)


def current_span() -> Span:
    """``trace.get_current_span()``."""
    span = get_current().get(SPAN_KEY)
    return span if isinstance(span, Span) else trace.INVALID_SPAN
