"""Run one sandbox process to the end: feed stdin, keep capped output, enforce wall time.

Blocking by design (the pool runs it on worker threads): one ``selectors`` loop watches the
output pipes, the stdin pipe and a pidfd of the process, so a program that closes its output
and keeps running is still seen to run, and one that floods its output is killed as soon as it
passes the cap instead of being drained. ``os.wait4`` reaps it and returns the CPU time of the
whole process tree (each level of the sandbox reaps the one below it).

Killing is by process group: ``bwrap`` leads its own session, and its inner init dies with it
(``--die-with-parent``), which ends every process of the sandbox's pid namespace.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rollgym.sandbox._bwrap import LAUNCH_ENV, Launch, exec_marker, sandbox_owner, user_switch
from rollgym.sandbox._cgroup import ExecCgroup, enter_cgroup_argv
from rollgym.sandbox._stragglers import kill_stragglers
from rollgym.sandbox.limits import LIMIT_CPU, LIMIT_OUTPUT, LIMIT_WALL, ExecResult, SandboxLimits

_CHUNK = 65536
#: A shell reports "killed by signal N" as exit status 128 + N; bwrap passes that on.
_SIGNAL_BASE = 128


def run_exec(
    launch: Launch,
    stdin: bytes | None,
    limits: SandboxLimits,
    cgroup_parent: Path | None,
    name: str,
) -> ExecResult:
    """One exec as the sandbox user, in its own cgroup ``name`` under ``cgroup_parent`` when
    one is given and can be made (else on rlimits alone, its stragglers swept by marker)."""
    cgroup = None
    if cgroup_parent is not None:
        try:
            cgroup = ExecCgroup(cgroup_parent, name, limits)
        except OSError:
            cgroup = None
    if cgroup is None:
        try:
            return run_capped(launch, [], stdin, limits, user_switch())
        finally:
            kill_stragglers(exec_marker(name))
    uid, gid = sandbox_owner()
    prefix = enter_cgroup_argv(cgroup.procs, bool(user_switch()), uid, gid)
    return run_capped(launch, prefix, stdin, limits, {}, cgroup)


def run_capped(
    launch: Launch,
    prefix: list[str],
    stdin: bytes | None,
    limits: SandboxLimits,
    popen_kwargs: dict[str, Any],
    cgroup: ExecCgroup | None = None,
) -> ExecResult:
    """Run ``prefix + launch`` to completion under ``limits``; never raises for the
    program's faults.

    With ``cgroup`` (which ``prefix`` enters), CPU time is the cgroup's, and the cgroup is
    emptied and removed before this returns, so no process of the exec survives it.
    """
    try:
        return _run(launch, prefix, stdin, limits, popen_kwargs, cgroup)
    finally:
        if cgroup is not None:
            cgroup.finish()


def _start(
    launch: Launch, prefix: list[str], stdin: bytes | None, popen_kwargs: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """Start the exec from a clean environment, its options on a pipe it alone inherits
    (besides stdio: ``close_fds`` closes everything else of the server)."""
    data = launch.options_data()
    if not data:
        return _popen(prefix + launch.argv(None), stdin, (), popen_kwargs)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # a few KiB of options: well within a pipe's 64 KiB
        os.close(write_end)
        write_end = -1
        return _popen(prefix + launch.argv(read_end), stdin, (read_end,), popen_kwargs)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def _popen(
    argv: list[str], stdin: bytes | None, fds: tuple[int, ...], popen_kwargs: dict[str, Any]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(LAUNCH_ENV),
        cwd="/",  # not the server's directory: nothing of it in bwrap's /proc/<pid>/cwd
        close_fds=True,
        pass_fds=fds,
        **popen_kwargs,
    )


def _run(
    launch: Launch,
    prefix: list[str],
    stdin: bytes | None,
    limits: SandboxLimits,
    popen_kwargs: dict[str, Any],
    cgroup: ExecCgroup | None,
) -> ExecResult:
    started = time.perf_counter()
    proc = _start(launch, prefix, stdin, popen_kwargs)
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    deadline = started + limits.wall_s
    outputs: dict[int, bytearray] = {}
    limit: str | None = None
    try:
        limit = _pump(proc, stdin or b"", deadline, limits.output_bytes, outputs)
        if limit is not None:
            _kill(proc)
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        _kill(proc)
        with contextlib.suppress(ChildProcessError):
            os.wait4(proc.pid, 0)
        raise
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    if cgroup is not None:
        cpu = cgroup.cpu_seconds() or cpu
    exit_code = proc.returncode if proc.returncode >= 0 else _SIGNAL_BASE - proc.returncode
    signalled = exit_code > _SIGNAL_BASE
    if limit is None and signalled and _cpu_limit_hit(exit_code - _SIGNAL_BASE, cpu, limits):
        limit = LIMIT_CPU
    out = outputs.get(out_fd, bytearray())
    err = outputs.get(err_fd, bytearray())
    return ExecResult(
        exit_code=exit_code,
        stdout=out[: limits.output_bytes].decode(errors="replace"),
        stderr=err[: max(0, limits.output_bytes - len(out))].decode(errors="replace"),
        wall_s=wall,
        cpu_s=cpu,
        timed_out=limit in (LIMIT_WALL, LIMIT_CPU),
        killed=signalled or limit is not None,
        limit=limit,
        stdout_bytes=len(out),
        stderr_bytes=len(err),
        truncated=len(out) + len(err) > limits.output_bytes,
    )


def _cpu_limit_hit(signal_number: int, cpu: float, limits: SandboxLimits) -> bool:
    """SIGXCPU is the CPU limit's own signal; a SIGKILL is its second step only when the
    (cgroup-measured) CPU time shows the limit was spent."""
    if signal_number == signal.SIGXCPU:
        return True
    return signal_number == signal.SIGKILL and cpu >= limits.cpu_s * 0.9


def _pump(
    proc: subprocess.Popen[bytes],
    stdin: bytes,
    deadline: float,
    cap: int,
    outputs: dict[int, bytearray],
) -> str | None:
    """Move bytes until the process has exited and its pipes are closed; return the limit
    that must end it early (wall or output), or None."""
    assert proc.stdout is not None and proc.stderr is not None
    pidfd = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    try:
        for pipe in (proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
            outputs[pipe.fileno()] = bytearray()
            sel.register(pipe.fileno(), selectors.EVENT_READ)
        sel.register(pidfd, selectors.EVENT_READ)
        stdin_fd = -1
        view = memoryview(stdin)
        if proc.stdin is not None:
            stdin_fd = proc.stdin.fileno()
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        open_pipes, exited, total = 2, False, 0
        while open_pipes or not exited:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return LIMIT_WALL
            for key, _ in sel.select(remaining):
                fd = key.fd
                if fd == pidfd:
                    exited = True
                    sel.unregister(pidfd)
                elif fd == stdin_fd:
                    view = _feed(proc, sel, view)
                else:
                    try:
                        chunk = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        open_pipes -= 1
                        continue
                    outputs[fd] += chunk
                    total += len(chunk)
                    if total > cap:
                        return LIMIT_OUTPUT
        return None
    finally:
        sel.close()
        os.close(pidfd)


def _feed(
    proc: subprocess.Popen[bytes], sel: selectors.BaseSelector, view: memoryview
) -> memoryview:
    """Write what the pipe takes; close stdin when all is written or the reader is gone."""
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    try:
        written = os.write(fd, view[:_CHUNK]) if view else 0
    except BlockingIOError:
        return view
    except BrokenPipeError:
        written, view = 0, view[:0]
    view = view[written:]
    if not view:
        sel.unregister(fd)
        proc.stdin.close()
    return view


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
