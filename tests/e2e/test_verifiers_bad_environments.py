"""A bad verifiers environment is one line naming it and the protocol step, never a traceback.

Before any rollout (``rollgym run`` exits 2 with one line): a module that is not there, an
object that is not a verifiers environment, a loader that raises. Per rollout (one line each in
failures.jsonl): an environment whose own code raises during its rollout, one whose rollout
never finishes (the rollout's time limit), and a model call the model server refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2e_support import assert_no_traceback
from foreign_support import assert_each_failed_in_one_line
from verifiers_support import VerifiersJob, require_verifiers, routed, verifiers_env

from server_specs import simulated_model

require_verifiers()

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_such_env_module", "no module named 'no_such_env_module'"),
        ("verifiers_bad", "module 'verifiers_bad' exposes no load_environment()"),
        (
            "verifiers_bad:not_an_env",
            "'verifiers_bad:not_an_env' is a int, not a verifiers Environment",
        ),
        ("verifiers_bad:returns_a_dict", "returned a dict, not a verifiers Environment"),
        ("verifiers_bad:broken", "raised while loading: RuntimeError: the dataset is gone"),
    ],
)
def test_an_environment_that_does_not_load_is_one_line(
    tmp_path: Path, target: str, says: str
) -> None:
    job = VerifiersJob(tmp_path)
    job.write(
        {"policy": simulated_model(), "bad": verifiers_env(target)},
        routed("bad", 2),
        environment_routes={"bad": "bad"},
    )
    proc = job.run(timeout=120)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "config error" in line]
    assert len(lines) == 1 and "servers.bad.verifiers_environment: " in lines[0], proc.stderr
    assert says in lines[0], lines[0]
    assert_no_traceback(job.out, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("target", "options", "says"),
    [
        ("verifiers_bad:load_raising", {}, "rollout: RuntimeError: the referee fell asleep"),
        ("verifiers_bad:load_hanging", {"rollout_timeout_s": 2}, "rollout: no end within 2 s"),
        # the worker process dies: its rollouts in flight fail, and the ones after it at once
        ("verifiers_bad:load_dying", {}, "worker: the verifiers worker exited (status 3)"),
        # a model call that does not answer in time: the rollout fails, it is not scored 0
        ("verifiers_arith", {"request_timeout_s": 0.5}, "model call: "),
    ],
)
def test_an_environment_failing_in_its_rollout_fails_it_in_one_line(
    tmp_path: Path, target: str, options: dict[str, Any], says: str
) -> None:
    job = VerifiersJob(tmp_path)
    job.write(
        {"policy": simulated_model(3.0), "bad": verifiers_env(target, **options)},
        routed("bad", 3),
        environment_routes={"bad": "bad"},
        max_attempts=1,
    )
    proc = job.run(timeout=180)
    assert_each_failed_in_one_line(job, proc, 3, "environment 'bad' (verifiers environment ", says)
    assert_no_traceback(job.out, proc.stdout, proc.stderr)
