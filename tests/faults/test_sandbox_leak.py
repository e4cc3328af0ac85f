"""A whole run with canary secrets in the driver's environment: no sandbox of the run can see
them, and none reaches a file of the run.

The driver's environment (an API key, an OTLP header, a ``ROLLGYM_`` value) is passed on to
the servers it launches; the ``terminal`` environment runs each rollout's check command in
the rollout's sandbox, and that check passes (reward 1.0) only when it read the sandbox's
PID 1 (``bwrap``) and found no canary in any ``/proc/*/environ`` or ``/proc/*/cmdline``.
"""

from __future__ import annotations

import pytest
from e2e_support import Job, agent

from rollgym.sandbox import unavailable_reason

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]

CANARIES = {
    "OPENAI_API_KEY": "canary-openai-run-2c8e",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer canary-otel-run-6a1d",
    "ROLLGYM_CANARY_TOKEN": "canary-rollgym-run-e04b",
}
#: Passes when PID 1 is bwrap and no visible process shows a canary (the patterns are
#: written so that the check's own command line does not match them).
CHECK = (
    "grep -q bwrap /proc/1/cmdline && ! cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline "
    "2>/dev/null | tr '\\0' '\\n' | grep -q -e '[c]anary-' -e '[R]OLLGYM_SERVER_SPEC' "
    "-e '[O]TEL_EXPORTER'"
)


def test_no_sandbox_of_a_run_sees_the_drivers_secrets(
    job: Job, no_leftover_servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    task = {"id": "no_leak", "prompt": "Say done.", "files": {"a.txt": "x\n"}, "check": CHECK}
    limits = {"wall_s": 15, "cpu_s": 2, "memory_mb": 256}
    job.write(
        {
            "policy": {
                "kind": "model",
                "impl": "simulated",
                "latency": {"kind": "fixed", "seconds": 0.001},
            },
            "terminal": {"kind": "environment", "impl": "terminal", "limits": limits},
            "sheller": agent("tool_loop", model="policy", environment="terminal", max_turns=2),
        },
        [{"agent": "sheller", "inline": task} for _ in range(4)],
        concurrency=4,
        timeout_s=60,
        agent="sheller",
    )
    done = job.run(timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rewards = [row["reward"] for row in job.rollouts]
    assert rewards == [1.0] * 4, job.rollouts
    for path in job.out.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert b"canary-" not in text, f"a canary reached {path}"
