"""Start-up: ``rollgym serve`` of a config vs one bare FastAPI/uvicorn app, alternating.

Each round starts, in turn, a bare FastAPI app under uvicorn (``GET /health``, nothing else)
and ``rollgym serve CONFIG`` (default: the quickstart's five servers and its trace store). The
bare app is ready when the bench's first ``GET /health`` answers; ``rollgym serve`` when it has
printed every server's URL (it prints them once each one's ``/health`` answered). Both are then
stopped with SIGTERM and reaped with ``wait4``, whose resource usage is the CPU of the whole
process tree (every server and the store are reaped by ``rollgym serve``).

Prints the median wall time to ready of each, their ratio (target <= 2), and the median CPU
seconds of each tree from start to exit. Run it on an otherwise idle machine for the figure;
on a loaded one the ratio is still side by side, but say how loaded it was (load average).

Every process writes and reads its compiled bytecode in a temporary cache (one discarded
warm-up round fills it), as an installed package has its ``.pyc`` files; ``--cold`` keeps the
environment's setting instead (with ``PYTHONDONTWRITEBYTECODE`` set, every process compiles
rollgym from source).

    python bench/startup.py --rounds 5
    python bench/startup.py --breakdown     # one serve: each process's start and CPU at ready
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BARE_APP = """
import sys
import fastapi, uvicorn
app = fastapi.FastAPI()
@app.get("/health")
def health():
    return {"status": "ok"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
POLL_S = 0.005
#: The environment of every process the bench starts (see :func:`_warm_bytecode`).
ENV: dict[str, str] = dict(os.environ)


def _warm_bytecode(cache: str) -> None:
    """Let every process write and read compiled bytecode, in ``cache`` (outside both
    checkouts): an installed package has its ``.pyc`` files, so start-up is measured with
    them. A machine with ``PYTHONDONTWRITEBYTECODE`` set compiles rollgym's ~120 modules from
    source in every process (about 0.45 s of the driver's CPU, measured with cProfile), while
    the bare app's FastAPI comes precompiled from site-packages."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = cache


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> float:
    """SIGTERM, reap with wait4; the CPU seconds (user + system) of the process tree."""
    proc.send_signal(signal.SIGTERM)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped here: keep Popen from waiting again
    return usage.ru_utime + usage.ru_stime


def bare_app(timeout_s: float) -> tuple[float, float]:
    """Seconds until the bare app's first answer, and its CPU seconds."""
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", BARE_APP, str(port)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = start + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        if time.perf_counter() > deadline or proc.poll() is not None:
            raise SystemExit("the bare app did not answer")
        time.sleep(POLL_S)
    ready = time.perf_counter() - start
    return ready, _stop(proc)


def rollgym_serve(
    config: str, servers: int, timeout_s: float, src: str | None = None
) -> tuple[float, float]:
    """Seconds until ``rollgym serve`` printed all ``servers`` URLs, and its tree's CPU.

    ``src``: run the rollgym found there instead (``PYTHONPATH``), for a before/after."""
    env = dict(ENV)
    if src is not None:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory(prefix="rollgym-startup-") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rollgym", "serve", config, f"run.output_dir={out}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,  # unbuffered: select() then sees every line still unread
        )
        assert proc.stdout is not None
        seen = 0
        deadline = start + timeout_s
        while seen < servers:
            if not select.select([proc.stdout], [], [], max(0.0, deadline - time.perf_counter()))[
                0
            ]:
                proc.kill()
                raise SystemExit(f"rollgym serve printed {seen} of {servers} URLs in time")
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"rollgym serve exited after {seen} of {servers} URLs")
            seen += 1
        ready = time.perf_counter() - start
        return ready, _stop(proc)


def _role(cmdline: list[str]) -> str:
    """A short name for one process of the tree, from its command line."""
    text = " ".join(cmdline)
    for marker, role in (
        ("rollgym.servers.server_process", "server"),
        ("forkserver", "fork server"),
        ("telemetry.pipeline.child", "span shipper"),
        ("rollgym.cli.traces", "trace store"),
        ("multiprocessing", "store worker"),
        ("rollgym serve", "driver"),
        ("-m rollgym", "driver"),
    ):
        if marker in text:
            return role
    return text[:60]


def _parent_cmdline(process: object) -> list[str] | None:
    """The command line of a ``psutil.Process``'s parent (None when it has gone)."""
    import psutil

    try:
        parent = process.parent()  # type: ignore[attr-defined]
        return None if parent is None else list(parent.cmdline())
    except psutil.Error:
        return None


def breakdown(config: str, servers: int, timeout_s: float) -> None:
    """One ``rollgym serve``: when every URL is printed, each process of the tree with its
    start (seconds after the command's) and CPU so far (``psutil``; a process that ended
    before ready is not counted).

    Starts are read against the command's own process start, not the wall clock: psutil
    dates a process from the boot time, which the kernel gives in whole seconds, so
    differences of two starts are right to a clock tick where one start alone is not."""
    import psutil

    with tempfile.TemporaryDirectory(prefix="rollgym-startup-") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rollgym", "serve", config, f"run.output_dir={out}"],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        )
        assert proc.stdout is not None
        for _ in range(servers):
            if not select.select([proc.stdout], [], [], timeout_s)[0]:
                proc.kill()
                raise SystemExit("rollgym serve did not print its URLs in time")
            proc.stdout.readline()
        ready = time.perf_counter() - start
        root = psutil.Process(proc.pid)
        root_start = root.create_time()
        rows = []
        for one in [root, *root.children(recursive=True)]:
            try:
                with one.oneshot():
                    cpu = one.cpu_times()
                    rows.append(
                        (
                            one.create_time() - root_start,
                            cpu.user + cpu.system,
                            one.cmdline(),
                            _parent_cmdline(one),
                        )
                    )
            except psutil.Error:
                continue
        _stop(proc)
    print(f"ready after {ready:.2f} s; load average {os.getloadavg()[0]:.1f}")
    total = 0.0
    for started, cpu, cmdline, parent in sorted(rows):
        total += cpu
        role = _role(cmdline)
        if cmdline == parent:  # forked without exec: a span shipper of its parent
            role = f"span shipper (forked by the {role})"
        print(f"  +{started:5.2f} s  {cpu:5.2f} s CPU  {role}")
    print(f"  CPU of the tree at ready: {total:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "quickstart.yaml"))
    parser.add_argument("--servers", type=int, default=5, help="URL lines CONFIG prints")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument(
        "--baseline-src",
        help="also run the rollgym whose sources are in this folder (another checkout's src/) "
        "in each round, for a before/after side by side",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="one serve only: print each process's start and CPU at ready, then exit",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="keep this environment's bytecode settings (PYTHONDONTWRITEBYTECODE: every "
        "process compiles rollgym from source) and skip the warm-up round",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollgym-startup-pyc-") as cache:
        if not args.cold:
            _warm_bytecode(cache)
            # one discarded round writes every process's bytecode
            rollgym_serve(args.config, args.servers, args.timeout_s)
            if args.baseline_src:
                rollgym_serve(args.config, args.servers, args.timeout_s, args.baseline_src)
            bare_app(args.timeout_s)
        if args.breakdown:
            breakdown(args.config, args.servers, args.timeout_s)
        else:
            measure(args)


def measure(args: argparse.Namespace) -> None:
    """Alternating rounds of the bare app, ``rollgym serve`` and the baseline; the medians."""
    bare: list[tuple[float, float]] = []
    served: list[tuple[float, float]] = []
    baseline: list[tuple[float, float]] = []
    load = os.getloadavg()[0]
    for i in range(args.rounds):
        # alternate which goes first, so drift of the machine falls on both
        order = [0, 1, 2] if i % 2 == 0 else [2, 1, 0]
        for which in order:
            if which == 0:
                bare.append(bare_app(args.timeout_s))
            elif which == 1:
                served.append(rollgym_serve(args.config, args.servers, args.timeout_s))
            elif args.baseline_src:
                baseline.append(
                    rollgym_serve(args.config, args.servers, args.timeout_s, args.baseline_src)
                )
        line = (
            f"round {i + 1}: bare {bare[-1][0]:.2f} s ({bare[-1][1]:.2f} s CPU), "
            f"rollgym serve {served[-1][0]:.2f} s ({served[-1][1]:.2f} s CPU)"
        )
        if baseline:
            line += f", baseline {baseline[-1][0]:.2f} s ({baseline[-1][1]:.2f} s CPU)"
        print(line, flush=True)
    bare_wall = statistics.median(r[0] for r in bare)
    serve_wall = statistics.median(r[0] for r in served)
    bare_cpu = statistics.median(r[1] for r in bare)
    serve_cpu = statistics.median(r[1] for r in served)
    pairs = sorted(s[0] / b[0] for s, b in zip(served, bare, strict=True))
    print(f"load average at start {load:.1f}, now {os.getloadavg()[0]:.1f}")
    print(f"ready: bare app {bare_wall:.2f} s, rollgym serve {serve_wall:.2f} s (medians)")
    print(f"ratio of medians (target <= 2): {serve_wall / bare_wall:.2f}")
    print(f"pairs: {', '.join(f'{p:.2f}' for p in pairs)}")
    print(
        f"CPU to exit: bare app {bare_cpu:.2f} s, rollgym serve {serve_cpu:.2f} s "
        f"(ratio {serve_cpu / bare_cpu:.2f})"
    )
    if baseline:
        base_wall = statistics.median(r[0] for r in baseline)
        base_cpu = statistics.median(r[1] for r in baseline)
        print(
            f"baseline ({args.baseline_src}): ready {base_wall:.2f} s, ratio to the bare app "
            f"{base_wall / bare_wall:.2f}, CPU {base_cpu:.2f} s; this checkout / baseline: "
            f"{serve_wall / base_wall:.2f} wall, {serve_cpu / base_cpu:.2f} CPU"
        )


if __name__ == "__main__":
    main()
