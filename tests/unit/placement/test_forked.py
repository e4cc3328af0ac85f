"""The fork server's driver side: when it is used, and when one started ahead is not taken."""

from __future__ import annotations

import os
import sys

import pytest

from rollgym.forked_child import forking_enabled
from rollgym.placement import forked

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_the_fork_server_is_off_with_the_variable_at_zero() -> None:
    assert not forking_enabled({forked.ENV_FORK_SERVER: "0"})
    assert forking_enabled({}) == sys.platform.startswith("linux")


def test_only_the_interpreter_variables_decide_whether_one_started_ahead_fits() -> None:
    env = {"PYTHONPATH": "/a", "PYTHONHASHSEED": "0", "OTEL_X": "y", "HOME": "/h"}
    assert forked._interpreter_env(env) == {"PYTHONPATH": "/a", "PYTHONHASHSEED": "0"}


@linux_only
def test_one_started_ahead_for_another_python_path_is_let_go(tmp_path) -> None:
    logs = tmp_path / "logs"
    forked.prestart(logs, [("arithmetic", "environment")], {**os.environ, "PYTHONPATH": "/x"})
    ahead = forked._prestarted[logs].process
    # the launch's servers would import from elsewhere: it starts its own
    assert forked.take_prestarted(logs, {**os.environ, "PYTHONPATH": "/y"}) is None
    assert ahead.poll() is not None and logs not in forked._prestarted


@linux_only
def test_nothing_is_started_ahead_without_servers_to_fork(tmp_path) -> None:
    forked.prestart(tmp_path / "logs", [])
    assert tmp_path / "logs" not in forked._prestarted
