"""The one error tree of rollgym.

Every error rollgym raises on purpose is a :class:`RollgymError`, so an embedder can catch the
whole family with one ``except``. Foreign errors (aiohttp, pydantic, yaml) are translated at
one boundary each and carry *where* the problem is: a file and line, a config key path, a
server name, a request field. Errors are named where they happen: the HTTP client raises
transport errors, and only the caller that knows what the call was for classifies them (the
driver into ``DispatchError`` kinds, an agent into a ``ServerCallError``)::

    RollgymError
    ├── ConfigError              bad job config: file, key path, what was expected
    ├── InputError               an input row that cannot be read: file, line, field
    ├── OutputError              a record that cannot be written (full disk): resumable
    ├── RunDirBusy               an output directory another run is writing: who, since when
    ├── LaunchError              a server that did not start or never became healthy
    ├── ExportError              a run folder that cannot be exported to Parquet
    ├── CompareError             a run folder that cannot be compared (missing, no records)
    ├── StoreVersionError        a traces.db written by a newer rollgym (its schema unknown)
    ├── UnusableStoreFile        a traces.db that is corrupt, cut short or not a database
    ├── SandboxUnavailable       sandboxes cannot run on this machine: what to install
    ├── TransportError           an outgoing HTTP request got no whole answer (HttpClient)
    │   ├── ConnectError             could not connect, or the connection broke mid-exchange
    │   │   └── ConnectionRefused        nothing listens at the address (a dead replica)
    │   ├── RequestTimeout           no whole answer within the request's time limit
    │   └── ExchangeRefused          refused by the client itself: too large, cross-host redirect
    ├── HTTPError                raised in a server's handler: answer this status and message
    ├── ServerCallError          a rollout's call to its model or environment failed
    ├── InvariantBroken          rollgym's own invariant did not hold: a bug, never bad input
    └── DispatchError            one attempt of one rollout went wrong (the driver's view)
        ├── TransientDispatchError   retried: connection error, timeout, HTTP 5xx or 429
        └── PermanentDispatchError   not retried: HTTP 4xx, an answer without a numeric reward

Any HTTP status comes back as an answer, never as a transport error: the caller decides what
it means (the driver: ``http_4xx``, ``http_5xx``...; a rollout's model call: a
``ServerCallError`` with the status). A failed rollout is data, not an exception that takes the
run down: the driver turns a ``DispatchError`` into a failure record (``failures.jsonl``) with
its ``error_kind``.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Why a rollout (or an input line) failed: the ``error_kind`` of a ``failures.jsonl`` line and
#: the ``kind`` of a :class:`DispatchError`. The one list of the failure vocabulary; the driver,
#: the client's refusals and the supervisor name their failures from it.
ErrorKind = Literal[
    # an input line or its route (driver/rows.py)
    "invalid_row",
    "unknown_agent",
    "unknown_route",
    # no whole answer (driver/dispatch.py, from the client's transport errors)
    "connection_error",
    "timeout",
    # the client refused the exchange itself (http/limits.py)
    "request_too_large",
    "response_too_large",
    "redirect_refused",
    "invalid_url",
    # the answer (driver/dispatch.py)
    "http_5xx",
    "http_429",
    "http_4xx",
    "authentication",
    "invalid_response",
    "missing_reward",
    # a replica gone for good (placement/supervisor.py); an interrupted run (driver/retry.py)
    "server_down",
    "cancelled",
    # every attempt ran on a policy version more than max_staleness behind (driver/retry.py)
    "stale",
    # every attempt had a model answer that was not whole: a cut stream, no finish reason
    # (driver/retry.py, run.incomplete_model_calls: retry)
    "incomplete_model_call",
    # a DispatchError raised without a kind of its own
    "dispatch_error",
    "transient",
    "permanent",
]
#: Every :data:`ErrorKind` value, for readers that check a recorded ``error_kind``.
ERROR_KINDS: frozenset[str] = frozenset(get_args(ErrorKind))

#: The error ``field`` that marks a refused credential (an upstream 401/403) all the way to
#: the driver, which records it as a permanent ``authentication`` failure, never retried.
AUTHENTICATION = "authentication"
AUTH_STATUSES = (401, 403)


class RollgymError(Exception):
    """Root of every error rollgym raises on purpose."""


class ConfigError(RollgymError):
    """The job config is invalid; raised before any server starts, or by a launched server's
    start-time check (its import, a variable it names, a package it needs: one line, before
    the run's first rollout; :mod:`rollgym.servers.start_checks`).

    ``source`` is the config file (or ``"<overrides>"``), ``key_path`` the dotted key.
    """

    def __init__(self, message: str, *, source: str = "", key_path: str = "") -> None:
        self.source = source
        self.key_path = key_path
        where = ": ".join(part for part in (source, key_path) if part)
        super().__init__(f"{where}: {message}" if where else message)


class RenamedOptionWarning(FutureWarning):
    """A job config names a server option by its old name: it still works, under the new
    name. Said once per key when the config is validated; ``rollgym run`` and ``serve`` print
    it as one line on stderr, a library caller sees it as Python's ``FutureWarning``."""

    def __init__(self, *, source: str, key_path: str, new_name: str) -> None:
        self.source = source
        self.key_path = key_path
        self.new_name = new_name
        where = ": ".join(part for part in (source, key_path) if part)
        super().__init__(f"{where}: now called '{new_name}'; the old name still works")


class InputError(RollgymError):
    """An input line that cannot become a rollout: malformed JSON, not an object, a bad field."""

    def __init__(self, message: str, *, path: str, line: int, field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        where = f"{path}:{line}" + (f": field {field!r}" if field else "")
        super().__init__(f"{where}: {message}")


class OutputError(RollgymError):
    """A record could not be written (a full disk, a lost mount): the run stops, resumable."""

    def __init__(self, path: object, exc: OSError | str) -> None:
        self.path = path
        reason = exc if isinstance(exc, str) else (exc.strerror or str(exc))
        super().__init__(
            f"cannot write {path}: {reason}; the run stopped after its last whole record: "
            "free space and run the same command again to resume"
        )


class RunDirBusy(RollgymError):
    """Another run holds the output directory's lock (``driver/run_lock.py``): refused before
    anything is written, naming the run that holds it."""

    def __init__(self, output_dir: object, holder: dict[str, object]) -> None:
        self.output_dir = output_dir
        self.holder = holder
        pid, host, started = holder.get("pid"), holder.get("host"), holder.get("started")
        who = f"pid {pid}" if pid is not None else "another process"
        if host:
            who += f" on {host}"
        if isinstance(started, (int, float)):
            import time

            who += " since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
        super().__init__(
            f"{output_dir} is in use by another run ({who}); wait for it to end, "
            "or give another run.output_dir"
        )


class LaunchError(RollgymError):
    """A configured server failed to start or to become healthy."""

    def __init__(self, message: str, *, server: str) -> None:
        self.server = server
        super().__init__(f"server {server!r}: {message}")


class ExportError(RollgymError):
    """A run folder that cannot be exported (no trajectories, pyarrow missing)."""


class CompareError(RollgymError):
    """A run directory that cannot be compared (missing, or holding no rollout files)."""


class StoreVersionError(RollgymError):
    """A ``traces.db`` written by a newer rollgym than this one (its schema is unknown here)."""


class UnusableStoreFile(RollgymError):
    """A ``traces.db`` that is there but is no trace store this code can write: a corrupt,
    truncated or overwritten file. One line naming it; a run goes on without storing spans."""


class SandboxUnavailable(RollgymError):
    """Sandboxes cannot run on this machine; the message names what to install or enable."""


class TransportError(RollgymError):
    """An outgoing HTTP request got no whole answer. ``server`` is the server it was sent to.

    Raised only by :class:`~rollgym.http.client.HttpClient`; the message names the server,
    the method and the path.
    """

    def __init__(self, message: str, *, server: str) -> None:
        self.server = server
        super().__init__(message)


class ConnectError(TransportError):
    """The connection could not be made, or it broke before the whole answer arrived."""


class ConnectionRefused(ConnectError):
    """Nothing listens at the address (a dead server or replica)."""


class RequestTimeout(TransportError):
    """No whole answer within the request's time limit."""


class ExchangeRefused(TransportError):
    """The client refused the exchange on its own terms; another attempt would do the same.

    ``kind``: ``request_too_large`` (the body is over the limit, never sent),
    ``response_too_large`` (the answer grew past the limit while it was read),
    ``redirect_refused`` (a redirect to another host, never followed), ``invalid_url`` (a
    control character in the URL, never sent). The message names the config key that sets
    the limit, the two hosts, or where in the URL the character is.
    """

    def __init__(self, message: str, *, server: str, kind: ErrorKind) -> None:
        self.kind: ErrorKind = kind
        super().__init__(message, server=server)


class HTTPError(RollgymError):
    """Raised by a server's handler to answer ``status`` with ``{"error": message, "field": field}``.

    One exception type for every server means one place shapes error bodies
    (:func:`rollgym.http.server.create_app`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        detail: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        #: More keys of the error body (a failed rollout's own frames, its partial trajectory).
        self.detail = detail


class ServerCallError(RollgymError):
    """A model or environment call of a rollout did not succeed.

    ``status`` is the HTTP status the other server answered (None for no answer). ``bad_input``
    marks a refusal caused by the task itself (the environment rejected it), which the agent
    reports as 400 instead of its own failure; ``field`` is the field the other server named.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        bad_input: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.bad_input = bad_input


class InvariantBroken(RollgymError):
    """Something rollgym itself guarantees did not hold (a bug in rollgym, never bad input).

    Raised where a plain ``assert`` would vanish under ``python -O``: the message names the
    invariant and the value that broke it.
    """


class DispatchError(RollgymError):
    """One attempt of one rollout failed. ``kind`` becomes ``error_kind`` in failures.jsonl."""

    kind: ErrorKind = "dispatch_error"
    transient: bool = False
    #: What the server's error body said beyond its message (its ``frames``, its partial
    #: ``trajectory``), read by the dispatch; None: nothing more.
    detail: dict[str, object] | None = None

    def __init__(
        self, message: str, *, kind: ErrorKind | None = None, server: str | None = None
    ) -> None:
        if kind is not None:
            self.kind = kind
        self.server = server
        super().__init__(message)


class TransientDispatchError(DispatchError):
    """Worth another attempt: the connection failed, time ran out, or the answer was 5xx or 429."""

    kind = "transient"
    transient = True


class PermanentDispatchError(DispatchError):
    """Another attempt would fail the same way: HTTP 4xx, or an answer without a numeric reward."""

    kind = "permanent"
