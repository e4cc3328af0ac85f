"""What to tell the user about spans that did not surely reach the backend, and what helps.

One wording for the per-process log line and the run's summary (``summary.json`` ``warnings``
and the line under the final table), by reason, because each reason has a different remedy:

- ``queue_full``: spans were made faster than they were exported; a longer flush limit does
  nothing for them. A larger ``telemetry.max_queue_size`` or fewer spans
  (``telemetry.preset``) helps.
- ``export_failed``: the backend refused the batches or could not be reached (its first error
  is logged); check the endpoint and its headers.
- ``shutdown``: never sent whole by the time a process ended; a longer
  ``telemetry.flush_timeout_s`` helps when the backend is slow to start or slow to answer.
- unknown: sent whole, and no answer came (the request timeout ran out, the connection broke
  after the request went out, or the process ended while it was going out or awaiting its
  answer): the backend may have stored them, so they are neither delivered nor dropped (the
  batch size halves after each timeout); a smaller ``telemetry.max_export_batch_size`` or a
  longer ``OTEL_EXPORTER_OTLP_TIMEOUT`` helps a slow backend.
"""

from __future__ import annotations

from collections.abc import Mapping

ADVICE = {
    "queue_full": "spans were made faster than they were exported: raise "
    "telemetry.max_queue_size or record fewer spans (telemetry.preset)",
    "export_failed": "the backend refused them or could not be reached (its first error is "
    "in the log): check the endpoint and its headers",
    "shutdown": "never sent whole when a process ended: raise telemetry.flush_timeout_s if "
    "the backend is slow to start or to answer",
}
UNKNOWN_ADVICE = (
    "sent whole with no answer (too slow, or the connection broke), so the backend may have "
    "stored them: if it is slow, lower telemetry.max_export_batch_size or raise "
    "OTEL_EXPORTER_OTLP_TIMEOUT"
)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def loss_warnings(counts: Mapping[str, object]) -> list[str]:
    """One warning per reason with a count and its remedy; empty when nothing was lost."""
    warnings = []
    reasons = counts.get("spans_dropped_by_reason")
    dropped = _int(counts.get("spans_dropped"))
    if isinstance(reasons, Mapping) and reasons:
        for reason, n in sorted(reasons.items()):
            if _int(n):
                why = ADVICE.get(str(reason), "")
                warnings.append(f"telemetry: {n} span(s) dropped ({reason}): {why}")
    elif dropped:
        warnings.append(f"telemetry: {dropped} span(s) dropped")
    unknown = _int(counts.get("spans_unknown"))
    if unknown:
        warnings.append(f"telemetry: {unknown} span(s) delivery unknown: {UNKNOWN_ADVICE}")
    endpoint = counts.get("exporter_unreachable")
    if endpoint:
        warnings.append(
            f"telemetry: the OTLP endpoint {endpoint} was unreachable at the start; nothing "
            "was exported (check the endpoint; telemetry.require_exporter: true stops the run)"
        )
    return warnings


def loss_line(counts: Mapping[str, object]) -> str | None:
    """The one loud line under the final table, or None when every span was delivered."""
    dropped = _int(counts.get("spans_dropped"))
    unknown = _int(counts.get("spans_unknown"))
    if not dropped and not unknown:
        return None
    exported = _int(counts.get("spans_exported"))
    total = dropped + unknown + exported
    parts = [f"{exported} of {total} span(s) delivered to the trace backend"]
    if dropped:
        parts.append(f"{dropped} NOT delivered")
    if unknown:
        parts.append(f"{unknown} unknown (sent, no answer: the backend may have them)")
    return (
        f"rollgym: telemetry: {', '.join(parts)} (all processes; summary.json telemetry and "
        "warnings say why and what helps)"
    )
