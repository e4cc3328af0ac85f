"""rollgym's own span pipeline: API spans recorded as tuples, encoded and posted by a child.

Used by :func:`rollgym.telemetry.setup.setup_telemetry` when rollgym owns tracing in a process
(the driver and every server it launches) and traces go out as OTLP/HTTP protobuf. Everything
else (console, gRPC, an exporter object passed in by a test or bench, ``ROLLGYM_SPAN_PIPELINE=
sdk``) keeps the SDK's ``TracerProvider`` and batch processor. See ``docs/telemetry.md``
("How spans leave a process") for the design and ``docs/benchmarks.md`` for what it buys.

Modules: :mod:`.records` (the record layout), :mod:`.recording` (tracer, spans),
:mod:`.shipper` (queue, pipe, counts), :mod:`.frames` (the pipe's framing), :mod:`.child` (the
exporter process), :mod:`.wire` (records -> OTLP protobuf bytes), :mod:`.build` (wiring). This
package imports nothing itself, so the child starts without loading the SDK.
"""
