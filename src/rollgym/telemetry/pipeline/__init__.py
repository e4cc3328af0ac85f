"""rollgym's span pipeline: API spans recorded as tuples, exported by a child or in-process.

The one provider rollgym builds for its own processes (the driver, every server it launches,
and tests through ``install_for_tests``): :class:`.recording.RecordingTracerProvider`. Its
records go to one of two exporter sides: for OTLP (the run's trace store or any OTLP
backend) the :class:`.shipper.SpanShipper`, which hands them to an exporter child that
encodes and posts them (OTLP/HTTP) or gives them to the SDK's gRPC exporter (OTLP/gRPC); for
the console, an exporter object passed in by a test or bench, and OTLP when the child cannot
start, :class:`.in_process.InProcessExport`, which turns the same records into
``ReadableSpan`` s for that exporter. See ``docs/design/span-pipeline.md`` for the path a span
takes and why each layer exists.

Modules: :mod:`.records` (the record layout), :mod:`.recording` (tracer, spans),
:mod:`.shipper` (queue, pipe), :mod:`.frames` (the pipe's framing), :mod:`.child` (the
exporter process), :mod:`.wire` (records -> OTLP protobuf bytes), :mod:`.readable` (records ->
``ReadableSpan``), :mod:`.in_process` (the in-process exporter side), :mod:`.build` (wiring).
This package imports nothing itself, so the child starts without loading the SDK.
"""
