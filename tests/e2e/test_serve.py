"""``rollgym serve CONFIG [NAME ...]``: a job's servers without the driver, stopped cleanly.

The real command in a subprocess: it prints ``name URL`` per server (only the named ones and
what they need), the servers answer real requests (an agent's ``/run``, the OpenAI SDK on the
model), and SIGTERM stops every one of them with exit code 0.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.request

import openai
import orjson
import pytest
from e2e_support import Job, server_pids_alive, wait_for

from server_specs import quickstart_servers

pytestmark = pytest.mark.e2e

SERVERS = quickstart_servers(episodes=False, walker=None)


def serve(job: Job, *args: str) -> subprocess.Popen[str]:
    return job.serve(*args)


def test_serve_named_servers_until_sigterm(job: Job, no_leftover_servers: None) -> None:
    job.write(SERVERS, [{"question": "1 + 1"}])
    proc = serve(job, "solver")
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().split() for _ in range(3)]
        urls = dict(lines)
        assert sorted(urls) == ["arith", "policy", "solver"]  # not "keys": nobody needs it
        assert all(url.startswith("http://127.0.0.1:") for url in urls.values())
        row = {"question": "6 * 7", "task_index": 0, "rollout_index": 0, "attempt": 0}
        request = urllib.request.Request(
            urls["solver"] + "/run",
            data=orjson.dumps(row),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200 and orjson.loads(answer.read())["reward"] == 1.0
        sdk = openai.OpenAI(base_url=urls["policy"] + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in sdk.models.list().data] == ["rollgym-simulated"]
        assert len(server_pids_alive(under=str(job.root))) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped" in err
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=30)


def test_serve_unknown_name_is_a_config_error(job: Job, no_leftover_servers: None) -> None:
    job.write(SERVERS, [])
    proc = serve(job, "nope")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "no server named 'nope'" in err and "policy" in err
