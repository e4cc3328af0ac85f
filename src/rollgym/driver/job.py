"""One run end to end: the Collector plus server launch, output files and the summary.

``run_job`` is deliberately a sequence of named steps (resolve the output directory, open the
ledger, start telemetry, launch servers, collect, aggregate, finalize) so each step can be read
and tested on its own; the data path itself lives in the :class:`~rollgym.driver.collector.Collector`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml

from rollgym.config import JobConfig, new_run_id, redacted
from rollgym.driver.collector import Collector
from rollgym.driver.input_file import compression_problem
from rollgym.driver.job_telemetry import JobTelemetry
from rollgym.driver.outcomes import Outcome, RolloutResult
from rollgym.driver.output import Ledger, OutcomeWriter
from rollgym.driver.progress import FailureEcho, ProgressReporter, count_rows, resume_line
from rollgym.driver.rows import read_jsonl
from rollgym.driver.run_lock import RunLock, unusable
from rollgym.driver.run_record import RunRecord, check_resume, with_record
from rollgym.driver.sessions import SessionLog
from rollgym.driver.summary import (
    Aggregator,
    Summary,
    merge_replicas,
    write_json_atomic,
)
from rollgym.driver.version_file import follow_version_file
from rollgym.driver.weight_probe import ProbeLog
from rollgym.errors import ConfigError, InputError, OutputError, TransportError
from rollgym.incarnations import IncarnationLog
from rollgym.placement.forked import discard_for, prestart_for
from rollgym.placement.supervisor import Supervisor, report_to_stderr
from rollgym.server_urls import ServerUrls
from rollgym.telemetry.groups import gate
from rollgym.telemetry.loss_report import loss_warnings
from rollgym.telemetry.run_session import RUN_SESSION
from rollgym.telemetry.span_counts import SpanCountRecord, add_record, read_server_records

RUN_FILE = "run.json"
AGGREGATE_TIMEOUT_S = 60.0


def resolve_run(config: JobConfig) -> tuple[str, Path]:
    """The run id and output directory; an existing ``run.json`` keeps the run id on resume."""
    run = config.run
    run_id, output_dir = run.run_id, run.output_dir
    if output_dir is None:
        run_id = run_id or new_run_id()  # the folder is named after the run id it records
        output_dir = Path("runs") / run_id
    stored = _read_run_file(output_dir)
    if stored is None:
        return run_id or new_run_id(), output_dir
    if stored.get("repeats") != run.repeats:
        raise ConfigError(
            f"{output_dir} holds a run with repeats={stored.get('repeats')}; a resume must keep it "
            f"(got {run.repeats}); use another run.output_dir for a different value",
            key_path="run.repeats",
        )
    stored_id = str(stored.get("run_id"))
    if run.run_id is not None and run.run_id != stored_id:
        raise ConfigError(
            f"{output_dir} holds run {stored_id!r}; got {run.run_id!r}", key_path="run.run_id"
        )
    return stored_id, output_dir


def _read_run_file(output_dir: Path) -> dict[str, object] | None:
    try:
        data = orjson.loads((output_dir / RUN_FILE).read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return None  # no run there yet (a folder that cannot be made is the lock's to say)
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(
            f"cannot read {output_dir / RUN_FILE}: {exc}", key_path="run.output_dir"
        ) from None
    return data if isinstance(data, dict) else None


def prepare_output(
    config: JobConfig, run_id: str, output_dir: Path, record: RunRecord | None = None
) -> None:
    """Create the folder; write ``run.json`` (kept across resumes, with what defines the run:
    :mod:`~rollgym.driver.run_record`) and ``config.yaml`` (redacted)."""
    (output_dir / "logs").mkdir(parents=True, exist_ok=True)
    stored = _read_run_file(output_dir)
    if stored is None:
        stored = {"run_id": run_id, "repeats": config.run.repeats, "input": str(config.run.input)}
        write_json_atomic(output_dir / RUN_FILE, stored)
    recorded = with_record(stored, record) if record is not None else None
    if recorded is not None:  # a new run, or a folder written before the record existed
        write_json_atomic(output_dir / RUN_FILE, recorded)
    resolved = redacted(config)
    resolved["run"]["run_id"] = run_id
    resolved["run"]["output_dir"] = str(output_dir)
    (output_dir / "config.yaml").write_text(
        yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8"
    )


class Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP (a closed terminal) end a run alike.

    The first stops admitting and cancels the rollouts in flight: they are recorded as
    ``cancelled``, the summary says ``interrupted``, the session is recorded as interrupted and
    the CLI prints the resume line. A second one hurries that same ending: whatever the run is
    waiting for (rollouts winding down, servers stopping) is cancelled, and the records, the
    summary, the session line and the resume line are still written. A third exits at once
    (servers die with the driver: PR_SET_PDEATHSIG), like a kill.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.collector: Collector | None = None
        self.main_task: asyncio.Task[Any] | None = None
        self.count = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self.main_task = asyncio.current_task()
        for sig in self.SIGNALS:
            loop.add_signal_handler(sig, self._on_signal)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in self.SIGNALS:
            loop.remove_signal_handler(sig)

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    @property
    def hurried(self) -> bool:
        """A second signal came: the ending skips what it was waiting for."""
        return self.count > 1

    def _on_signal(self) -> None:
        self.count += 1
        if self.count > 2:
            os._exit(130)  # servers die with us (PR_SET_PDEATHSIG)
        if self.count == 2:
            if self.main_task is not None:
                self.main_task.cancel()
            return
        if self.collector is not None:
            self.collector.interrupt()
        elif self.main_task is not None:
            self.main_task.cancel()

    def absorb(self) -> None:
        """Called where a hurried ending's cancellation is caught: the run goes on to write
        its records, so the cancellation is taken back (``Task.uncancel``)."""
        task = asyncio.current_task()
        while task is not None and task.uncancel() > 0:
            pass  # a signal before the collection began asked once more


def make_supervisor(config: JobConfig) -> Supervisor:
    """The watch over the run's launched servers, with each one's ``restart`` budget."""
    from rollgym.placement.launcher import dependencies

    launched = {name: server for name, server in config.servers.items() if server.impl}
    limits = {name: server.restart for name, server in launched.items()}
    replicas = {name: server.replicas for name, server in launched.items()}
    return Supervisor(limits, dependencies(config), replicas=replicas)


@asynccontextmanager
async def _servers(
    config: JobConfig,
    run_id: str,
    output_dir: Path,
    env: dict[str, str],
    supervisor: Supervisor | None,
) -> AsyncIterator[ServerUrls]:
    from rollgym.placement.launcher import launch_servers

    async with launch_servers(
        config, run_id=run_id, output_dir=output_dir, env=env, supervisor=supervisor
    ) as urls:
        yield urls


def make_collector(
    config: JobConfig,
    urls: ServerUrls,
    telemetry: JobTelemetry,
    rotation: Supervisor | None = None,
) -> Collector:
    """The job's Collector: agent and environment servers of the config, at their live URLs."""
    run = config.run
    agents = config.servers_of_kind("agent")
    names = agents + config.servers_of_kind("environment")
    return Collector(
        {name: urls[name] for name in names},
        options=run.collector_options(),
        agents=agents,
        metrics=telemetry.metrics,
        http_metrics=telemetry.http_metrics,
        rotation=rotation,
        replicas=urls.replicas,
        model_servers={name: urls[name] for name in config.servers_of_kind("model")},
    )


async def collect(
    collector: Collector,
    config: JobConfig,
    ledger: Ledger,
    writer: OutcomeWriter,
    aggregator: Aggregator,
) -> int:
    """Stream the input through the collector; record and count every outcome. Returns the count."""
    count = 0
    echo = FailureEcho()

    def record(outcome: Outcome) -> None:
        nonlocal count
        try:
            writer.write(outcome)
        except OutputError:
            # A full disk: stop the run. What is in flight is cancelled and, the writer being
            # broken, not recorded: the files end at the last whole record, a resume runs the rest.
            collector.interrupt()
            return
        if isinstance(outcome, RolloutResult):
            aggregator.add_result(
                outcome.dispatch_name,
                outcome.task_index,
                outcome.reward,
                outcome.usage,
                outcome.policy_lag,
            )
        else:
            aggregator.add_failure(
                outcome.dispatch_name, outcome.error_kind, outcome.rollout_index is None
            )
            echo.failed(outcome.error_kind, outcome.rollout_id, outcome.message)
        count += 1

    entries = read_jsonl(config.run.input, collector.router, collector.unique_ids())
    async with follow_version_file(collector, config.run.policy_version_file):
        await collector.run_entries(entries, record, ledger.skip if ledger.resumed else None)
    if writer.broken is not None:
        raise writer.broken
    return count


async def aggregate_metrics(
    collector: Collector, config: JobConfig, urls: ServerUrls
) -> dict[str, object]:
    """Each environment server's ``/aggregate_metrics`` answer (or the error getting it).

    A server with several replicas is asked once per replica (each holds the aggregates of
    the sessions it served); its entry adds them up and lists each replica's answer under
    ``replicas`` (:func:`~rollgym.driver.summary.merge_replicas`).
    """
    from rollgym.servers.spec import instance_name

    answers: dict[str, object] = {}
    for name in config.servers_of_kind("environment"):
        each: dict[str, object] = {}
        for replica, url in enumerate(urls.replicas_of(name)):
            instance = instance_name(name, replica)
            if gate.job:
                from rollgym.telemetry import spans

                with spans.aggregate_metrics_span(name):
                    each[instance] = await _aggregate_one(collector, name, url)
            else:
                each[instance] = await _aggregate_one(collector, name, url)
        answers[name] = each[name] if len(each) == 1 else merge_replicas(each)
    return answers


async def _aggregate_one(collector: Collector, name: str, url: str) -> object:
    try:
        response = await collector.client.post_json(
            name,
            url.rstrip("/") + "/aggregate_metrics",
            {},
            timeout=AGGREGATE_TIMEOUT_S,
            route="/aggregate_metrics",
            pinned=True,
        )
    except TransportError as exc:
        return {"error": str(exc)}
    if response.status != 200:
        return {"error": f"HTTP {response.status}: {response.data or response.text}"}
    return response.data


def finalize(summary: Summary, output_dir: Path) -> None:
    """Write ``summary.json`` (inside ``gym.job.finalize`` when the job group is on)."""
    if gate.job:
        from rollgym.telemetry import spans

        with spans.finalize_span():
            write_summary(summary, output_dir)
    else:
        write_summary(summary, output_dir)


class JobState:
    """What one run accumulates: counters, ledger, status; turns them into a :class:`Summary`."""

    def __init__(self, config: JobConfig, run_id: str, output_dir: Path) -> None:
        self.config = config
        self.run_id = run_id
        self.output_dir = output_dir
        self.aggregator = Aggregator(config.run.repeats, config.run.pass_threshold)
        try:
            self.ledger = Ledger.load(
                output_dir,
                config.run.repeats,
                retry_failed=config.run.retry_failed,
                feed=self.aggregator.add_record,
            )
        except OSError as exc:  # a record file that cannot be read (a folder in its place)
            raise unusable(output_dir, exc) from None
        self.status = "error"
        self.count = 0
        self.environments: dict[str, Any] = {}
        self.started = time.monotonic()
        self.supervisor = make_supervisor(config)
        self.warnings: list[str] = []
        self.sessions = SessionLog(output_dir)
        self.supervisor.incarnations = IncarnationLog(output_dir, self.sessions.index)
        #: The weight probes of the run's version file (the Collector's, once it ran).
        self.probes = ProbeLog()

    def summary(self) -> Summary:
        duration = time.monotonic() - self.started
        summary = Summary.from_aggregator(
            self.run_id, self.status, self.aggregator, duration, self.count
        )
        summary.environments = self.environments
        summary.servers = self.supervisor.to_json()
        summary.warnings = self.warnings + self.supervisor.gone()
        summary.probes = self.probes.summary()
        summary.warnings += self.probes.warnings()
        summary.output_dir = str(self.output_dir)
        return summary


async def _collect_phase(state: JobState, collector: Collector, interrupts: Interrupts) -> None:
    """Stream every row through the collector, recording each outcome; progress alongside."""
    progress = ProgressReporter(
        state.aggregator,
        collector.in_flight,
        total=_total(state.config),
        path=state.output_dir / "progress.json",
        interval_s=state.config.run.progress_interval_s,
        windows=lambda: collector.dispatch_windows,
    )
    progress.start()
    interrupts.collector = collector
    state.probes = collector.probes
    try:
        with OutcomeWriter(state.output_dir, session=state.sessions.index) as writer:
            try:
                state.count = await collect(
                    collector, state.config, state.ledger, writer, state.aggregator
                )
            except OutputError as exc:
                state.status = "output_error"
                state.warnings.append(str(exc))
                raise
        state.status = "completed"
    finally:
        interrupts.collector = None
        await progress.stop()
        if collector.dispatch_windows is not None:  # a window that closed, in the summary too
            state.warnings += collector.dispatch_windows.notices
        if interrupts.interrupted:
            state.status = "interrupted"


async def _job_body(
    state: JobState, collector: Collector, urls: ServerUrls, interrupts: Interrupts
) -> None:
    """The run-level work ``gym.job`` holds: collection, aggregate metrics, finalization."""
    state.sessions.begin(_current_trace_id())
    await _collect_phase(state, collector, interrupts)
    if state.status == "completed":
        state.environments = await aggregate_metrics(collector, state.config, urls)
    finalize(state.summary(), state.output_dir)


async def _serve_and_collect(
    state: JobState, telemetry: JobTelemetry, interrupts: Interrupts
) -> None:
    """Launch the servers, open the one client (outside any span), run the job body."""
    config, run_id = state.config, state.run_id
    supervisor = state.supervisor
    async with (
        _servers(config, run_id, state.output_dir, telemetry.server_env, supervisor) as urls,
        make_collector(config, urls, telemetry, supervisor) as collector,
    ):
        supervisor.on_rotation = replica_rotation(collector, urls)
        await telemetry.wait_for_store()  # no rollout ends before its spans can be committed
        if gate.job:
            from rollgym.telemetry import spans

            with spans.job_span(run_id):
                await _job_body(state, collector, urls, interrupts)
        else:
            await _job_body(state, collector, urls, interrupts)
        telemetry.note_rollouts_ended()


def replica_rotation(collector: Collector, urls: ServerUrls) -> Callable[[str, bool], None]:
    """What the supervisor calls when a replica dies or is back: the driver's client holds a
    dead replica out of rotation until its restart is healthy (no attempt is spent on it)."""
    from rollgym.servers.spec import instance_name

    by_instance = {
        instance_name(name, index): url
        for name, replica_urls in urls.replicas.items()
        for index, url in enumerate(replica_urls)
    }

    def changed(instance: str, serving: bool) -> None:
        url = by_instance.get(instance)
        target = collector.client.replicas.containing(url) if url else None
        if target is None or url is None:
            return
        if serving:
            target.release(url)
        else:
            target.hold(url)

    return changed


def _current_trace_id() -> str | None:
    """The job's trace id when ``gym.job`` is open (for ``sessions.jsonl``), else None."""
    if not gate.job:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def _total(config: JobConfig) -> int | None:
    try:
        return count_rows(config.run.input) * config.run.repeats
    except (OSError, InputError):  # no ETA; reading the rows says what is wrong
        return None


def input_problem(path: Path) -> str | None:
    """What is wrong with ``path`` as the rows input, in words; None when it can be read.

    The input is read more than once (its checksum for a resume, its rows, its count for the
    ETA), so it must be a regular file, or ``/dev/null`` (an empty input: nothing to run)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if _is_devnull(path):
        return None
    if stat.S_ISREG(mode):
        try:
            return compression_problem(path)
        except OSError as exc:
            return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return "is a directory, not a JSONL file"
    if stat.S_ISFIFO(mode):
        return (
            "is a named pipe, not a regular file: the input is read more than once (its "
            "checksum, then its rows); write the rows to a file"
        )
    return "is not a regular file (a device or a socket): write the rows to a file"


def _is_devnull(path: Path) -> bool:
    try:
        return os.path.samefile(path, os.devnull)
    except OSError:
        return False


async def run_job(config: JobConfig, *, handle_signals: bool = False) -> Summary:
    """Run one job; return its summary (also in ``<output_dir>/summary.json``).

    ``handle_signals`` (the CLI sets it) turns Ctrl-C / SIGTERM into a clean interruption:
    in-flight rollouts become ``cancelled`` failures, the summary says ``interrupted``.
    """
    run_id, output_dir = resolve_run(config)
    problem = input_problem(config.run.input)
    if problem is not None:
        raise ConfigError(f"input file {config.run.input} {problem}", key_path="run.input")
    with RunLock(output_dir):  # one run at a time in a folder (held until we return or die)
        stored = _read_run_file(output_dir)
        record = RunRecord.of(config)
        check_resume(output_dir, stored, record)
        try:
            prepare_output(config, run_id, output_dir, record)
        except OSError as exc:
            raise unusable(output_dir, exc) from None
        return await _run_owned(config, run_id, output_dir, stored is not None, handle_signals)


async def _run_owned(
    config: JobConfig, run_id: str, output_dir: Path, resumed: bool, handle_signals: bool
) -> Summary:
    """The run, once it holds its output directory."""
    state = JobState(config, run_id, output_dir)
    reserve = _reserve_room(output_dir)
    if resumed:
        total = state.aggregator.expected_total(_total(config))  # a bad line: one record
        report_to_stderr(resume_line(output_dir, state.aggregator, total))
    interrupts = Interrupts()
    loop = asyncio.get_running_loop()
    if handle_signals:
        interrupts.install(loop)
    telemetry = JobTelemetry()
    try:
        prestart_for(config, output_dir)  # the servers' imports overlap the store's start
        telemetry.start(config, output_dir, run_id)
        telemetry.watch_store()
        session = RUN_SESSION.set(state.sessions.index)  # gym.run.session on its dispatches
        try:
            await _serve_and_collect(state, telemetry, interrupts)
        except asyncio.CancelledError:
            if not interrupts.hurried:
                raise  # a Ctrl-C before the collection began: the CLI says so
            interrupts.absorb()
        finally:
            RUN_SESSION.reset(session)
            if interrupts.interrupted:
                state.status = "interrupted"
            summary = state.summary()
            # servers have stopped and written their span counts; the driver flushes last
            summary.telemetry = _telemetry_counts(telemetry.flush(), config, output_dir)
            summary.telemetry.update(telemetry.store_counts())
            tail = telemetry.finish_tail_sampling()  # every span is in the store by now
            if tail is not None:
                summary.telemetry["tail_sampling"] = tail
            summary.warnings += telemetry_warnings(summary.telemetry)
            _release_room(reserve)  # summary.json and the session's end line fit in it
            write_summary(summary, output_dir)
            state.sessions.end(state.status, spans_lost=_spans_lost(summary.telemetry))
    finally:
        _release_room(reserve)
        discard_for(output_dir)
        try:
            await telemetry.stop_store()
        except asyncio.CancelledError:
            if not interrupts.hurried:
                raise
            interrupts.absorb()
        if handle_signals:
            interrupts.remove(loop)
    return summary


#: Room held on the output's disk while a session runs, freed just before summary.json and the
#: session's end line are written: a disk that another writer filled meanwhile still gets them
#: (a summary.json is 2-5 KiB).
SUMMARY_ROOM_BYTES = 16 * 1024
_ROOM_FILE = ".summary-room"


def _reserve_room(output_dir: Path) -> Path | None:
    """Allocate :data:`SUMMARY_ROOM_BYTES` in the output directory; None where it cannot."""
    path = output_dir / _ROOM_FILE
    try:
        with open(path, "wb") as room:
            os.posix_fallocate(room.fileno(), 0, SUMMARY_ROOM_BYTES)
    except (OSError, AttributeError):  # a full disk, or no fallocate: no room kept
        path.unlink(missing_ok=True)
        return None
    return path


def _release_room(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _spans_lost(telemetry: Mapping[str, object]) -> dict[str, int]:
    """The session's spans counted dropped or unknown, for its end line in sessions.jsonl."""
    return {
        key: value
        for key in ("spans_dropped", "spans_unknown")
        if isinstance(value := telemetry.get(key), int) and value > 0
    }


def write_summary(summary: Summary, output_dir: Path) -> None:
    """``summary.json``, if it can be written: on a full disk the run's own error (which says
    how to resume) matters more than a second one, so this only says it could not."""
    try:
        write_json_atomic(output_dir / "summary.json", summary.to_json())
    except OSError as exc:
        report_to_stderr(
            f"rollgym: summary.json could not be written ({exc.strerror or exc}); "
            "rollouts.jsonl and failures.jsonl hold every recorded rollout"
        )


def telemetry_warnings(counts: Mapping[str, object]) -> list[str]:
    """What the person running the job must hear about its trace store (dropped spans have
    their own line: :func:`rollgym.reading.report.telemetry_loss_line`)."""
    warnings = []
    if isinstance(why := counts.get("store_not_started"), str):
        warnings.append(f"the trace store did not start: {why}")
    if counts.get("store_deaths"):
        warnings.append(
            f"the trace store died {counts['store_deaths']} time(s) and was restarted "
            f"{counts['store_restarts']} time(s); it was down {counts['store_down_s']} s"
        )
    return warnings + loss_warnings(counts)


def _telemetry_counts(
    driver: SpanCountRecord, config: JobConfig, output_dir: Path
) -> dict[str, object]:
    """The span counts of every launched server plus the driver's own."""
    launched = [name for name, server in config.servers.items() if server.impl is not None]
    total: dict[str, object] = dict(read_server_records(output_dir / "logs", launched))
    add_record(total, driver)
    return total
