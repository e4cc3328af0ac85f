"""The defaults that more than one module needs, each written once.

A default that is restated drifts: the config's, the library API's and the process's own
would disagree the day one of them changes. Every module that needs one of these imports it
from here (the ground floor, so any room may), and the config's fields take their defaults
from the same names. Defaults used by one module only stay in that module.
"""

from __future__ import annotations

from typing import Final

#: Largest request body a server accepts and the driver sends (``run.max_request_bytes``).
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024
#: Largest answer the driver reads from an agent (``run.max_response_bytes``).
MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024

#: The reward at or above which a rollout counts as passed: pass@k in summary.json
#: (``run.pass_threshold``) and an environment's ``pass_rate`` (its ``pass_threshold``, which
#: follows the run's in a job).
PASS_THRESHOLD: Final = 1.0

#: Spans buffered per process before dropping (``telemetry.max_queue_size``).
SPAN_QUEUE_SIZE: Final = 65536
#: Spans per export request (``telemetry.max_export_batch_size``).
SPAN_EXPORT_BATCH_SIZE: Final = 512
#: Longest wait between two exports, in milliseconds (``telemetry.schedule_delay_ms``).
SPAN_SCHEDULE_DELAY_MS: Final = 500
#: How long a process waits at its end for unsent spans (``telemetry.flush_timeout_s``).
SPAN_FLUSH_TIMEOUT_S: Final = 60.0
