"""The one dispatch site: a single attempt of a single rollout, and what its answer means.

Every attempt of every rollout, from the CLI job or the library API, goes through
:func:`send_attempt`. That gives the ``gym.rollout.dispatch`` span exactly one home. The span
is gated before anything is built or imported (``gate.rollout``); with the gate closed the same
single POST runs with no context manager at all. Identity on the span comes from the collector
row, never from the posted body (an episode body carries it only as ``episode_id``).

The answer is classified here, once: transient failures (connection error, timeout, HTTP 5xx
and 429) may be retried by :mod:`rollgym.driver.retry`; permanent ones (other 4xx, a non-JSON
answer, an answer without a numeric ``reward``, including a rollgym server's own refusal of one
with ``{"field": "reward"}`` in its error body; a refused credential: 401/403, or an error body
with ``{"field": "authentication"}`` from an agent whose upstream refused its key; a row over
``run.max_request_bytes``, an answer over ``run.max_response_bytes``, a redirect to another
host) may not.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Mapping
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from rollgym.driver.dispatch_window import DispatchWindows
from rollgym.driver.outcomes import failure_detail
from rollgym.driver.policy_clock import PolicyClock
from rollgym.driver.rows import Rollout, collector_row, unstamped
from rollgym.errors import (
    AUTH_STATUSES,
    AUTHENTICATION,
    DispatchError,
    ErrorKind,
    ExchangeRefused,
    PermanentDispatchError,
    RequestTimeout,
    TransientDispatchError,
    TransportError,
)
from rollgym.http.client import HttpClient, HttpResponse
from rollgym.identity import episode_body
from rollgym.rewards import is_reward
from rollgym.telemetry.groups import gate
from rollgym.telemetry.names import (
    OUTCOME_ERROR,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    ROLLOUT_ADMISSION_WAIT,
)
from rollgym.telemetry.sampling_tail import AttemptEnd
from rollgym.telemetry.sampling_tail import active as tail_sampling
from rollgym.trajectory.record import CAPTURE_HEADER, Capture
from rollgym.trajectory.usage import USAGE_KEY

#: The extra headers of an attempt's POST (the capture header), or None.
Headers = Mapping[str, str] | None


class AttemptOutcome(NamedTuple):
    """What one attempt produced: a reward and the whole answer, or a dispatch error.

    A named tuple, not a frozen dataclass: one is built per attempt on the hot path, and a
    tuple is several times cheaper to build while being just as immutable.
    """

    rollout_id: str
    attempt: int
    reward: float | None
    result: dict[str, Any] | None
    error: DispatchError | None
    trace_id: str | None
    started_at: float
    duration_s: float
    #: False when the trace's sampler dropped it: the trace id names a trace no backend has.
    trace_sampled: bool = True


def outcome_label(error: DispatchError | None) -> str:
    """``ok`` / ``timeout`` / ``error``: the ``gym.rollout.outcome`` value."""
    if error is None:
        return OUTCOME_OK
    return OUTCOME_TIMEOUT if error.kind == "timeout" else OUTCOME_ERROR


def _error_text(response: HttpResponse) -> str:
    data = response.data
    if isinstance(data, dict) and "error" in data:
        field = f" (field {data['field']!r})" if data.get("field") else ""
        return f"{data['error']}{field}"
    return response.text or (repr(data)[:200] if data is not None else "")


def _field_of(response: HttpResponse) -> object:
    data = response.data
    return data.get("field") if isinstance(data, dict) else None


def _says_no_reward(response: HttpResponse) -> bool:
    """A rollgym server refuses its own reward-less answer as ``{"field": "reward"}``.

    Another attempt would produce the same kind of answer, so it is permanent, like a 200
    without a reward.
    """
    return _field_of(response) == "reward"


def _refuses_row(response: HttpResponse) -> bool:
    """A 400 naming a field of the row itself (``{"field": "row.<key>"}``): the agent cannot
    serve that row (an image input, an unknown sampling parameter), which is the row's fault."""
    field = _field_of(response)
    return response.status == 400 and isinstance(field, str) and field.startswith("row.")


def classify(response: HttpResponse, server: str) -> tuple[float, dict[str, Any]]:
    """Return ``(reward, answer)`` or raise the right :class:`DispatchError`."""
    status = response.status
    if status >= 400:
        text = _error_text(response)
        message = f"{server!r} answered HTTP {status}: {text}"
        if _says_no_reward(response):
            raise PermanentDispatchError(message, kind="missing_reward", server=server)
        if _refuses_row(response):
            raise PermanentDispatchError(message, kind="invalid_row", server=server)
        if status in AUTH_STATUSES or _field_of(response) == AUTHENTICATION:
            # A refused credential fails every attempt alike: permanent, never retried.
            raise PermanentDispatchError(message, kind="authentication", server=server)
        if status >= 500:
            raise TransientDispatchError(message, kind="http_5xx", server=server)
        if status == 429:
            raise TransientDispatchError(message, kind="http_429", server=server)
        raise PermanentDispatchError(message, kind="http_4xx", server=server)
    data = response.data
    if data is None:
        raise PermanentDispatchError(
            f"{server!r} answered HTTP {status} with a body that is not JSON: {response.text[:200]!r}",
            kind="invalid_response",
            server=server,
        )
    if not isinstance(data, dict):
        raise PermanentDispatchError(
            f"{server!r} answered a JSON {type(data).__name__}, not an object with a numeric 'reward'",
            kind="missing_reward",
            server=server,
        )
    reward = data.get("reward")
    if not is_reward(reward):
        got = "no 'reward'" if "reward" not in data else f"'reward' = {reward!r}"
        raise PermanentDispatchError(
            f"{server!r} answered without a numeric 'reward' ({got}); keys: {sorted(data)[:10]}",
            kind="missing_reward",
            server=server,
        )
    return float(reward), data


class Rotation(Protocol):
    """Which servers are out of rotation (dead, restarting): the run's server supervisor.

    ``out_of_rotation`` is empty while every server serves, so the hot path pays one check.
    """

    out_of_rotation: dict[str, str]

    async def wait_in_rotation(self, server: str) -> DispatchError | None: ...

    def note_unreachable(self, server: str) -> None: ...


class Dispatcher:
    """Sends attempts through the one :class:`HttpClient` to the servers' base URLs.

    With a ``rotation``, an attempt for a server that is out of rotation (or calls one that
    is) waits until it is back, or fails at once when it is gone for good. With ``windows``,
    an attempt waits for room in its server's dispatch window before it is sent
    (:mod:`rollgym.driver.dispatch_window`); its time limit starts once it is sent.
    """

    def __init__(
        self,
        client: HttpClient,
        urls: dict[str, str],
        timeout_s: float,
        capture: Capture = "off",
        rotation: Rotation | None = None,
        clock: PolicyClock | None = None,
        windows: DispatchWindows | None = None,
    ) -> None:
        self._client = client
        #: The driver's policy version, for the lag on the dispatch span (None: not used).
        self._clock = clock
        self._windows = windows
        self._run_urls = {name: url.rstrip("/") + "/run" for name, url in urls.items()}
        self._timeout = timeout_s
        #: Asks the agent for a trajectory; None keeps the no-header fast path.
        self._headers: dict[str, str] | None = (
            {CAPTURE_HEADER: capture} if capture != "off" else None
        )
        self._rotation = rotation
        #: The capture header plus the policy floor, rebuilt only when the trainer sets a version.
        self._floored: tuple[dict[str, str] | None, Headers] = (None, self._headers)

    def _attempt_headers(self) -> Headers:
        """This attempt's headers: the capture header and, once the trainer set a policy
        version, the floor of the attempt's model calls (docs/policy-versions.md)."""
        floor = None if self._clock is None else self._clock.floor_headers
        if floor is None:
            return self._headers
        seen, merged = self._floored
        if seen is not floor:
            merged = {**(self._headers or {}), **floor}
            self._floored = (floor, merged)
        return merged

    async def send_attempt(self, rollout: Rollout, attempt: int) -> AttemptOutcome:
        """One POST ``/run`` for ``rollout``'s attempt ``attempt``; never raises a DispatchError."""
        target = rollout.target
        row = collector_row(rollout, attempt)
        rollout_id = rollout.rollout_id(attempt)
        body = episode_body(rollout_id, attempt, unstamped(row)) if target.episode else row
        server = target.server_name
        rotation = self._rotation
        waited = 0.0
        if rotation is not None and rotation.out_of_rotation:
            wait_started = time.perf_counter()
            down = await rotation.wait_in_rotation(server)
            waited = time.perf_counter() - wait_started
            if down is not None:
                return AttemptOutcome(rollout_id, attempt, None, None, down, None, time.time(), 0.0)
        windows = self._windows
        if windows is None:
            return await self._send(rollout, attempt, row, rollout_id, body, server, waited)
        window = windows.of(server)
        waited += await window.acquire()
        sent_at = time.perf_counter()
        outcome: AttemptOutcome | None = None
        try:
            outcome = await self._send(rollout, attempt, row, rollout_id, body, server, waited)
        finally:
            error = None if outcome is None else outcome.error
            window.release(
                sent_at,
                time.perf_counter() - sent_at,
                error is not None and error.kind == "timeout",
            )
        return outcome

    async def _send(
        self,
        rollout: Rollout,
        attempt: int,
        row: dict[str, Any],
        rollout_id: str,
        body: object,
        server: str,
        waited: float,
    ) -> AttemptOutcome:
        """The POST itself, from the moment the attempt is sent (its time limit starts here)."""
        target = rollout.task.target
        assert target is not None
        rotation = self._rotation
        post = self._client.post_json
        url = self._run_urls[server]
        headers = self._attempt_headers()
        started_at = time.time()
        t0 = time.perf_counter()
        sampled = True
        if gate.rollout:
            spans = _span_helpers()
            with spans.dispatch_span(row, target.dispatch_name, server) as span:
                if waited > 0:
                    span.set_attribute(ROLLOUT_ADMISSION_WAIT, waited)
                answer = await _post(post, server, url, body, self._timeout, headers)
                reward, result, error, trace_id = interpret(answer, server)
                spans.record_dispatch_outcome(span, outcome_label(error), reward)
                lag = None
                if result is not None:
                    versions = _versions_in(result)
                    clock = self._clock
                    lag = clock.lag(versions) if clock is not None and versions else None
                    spans.record_dispatch_versions(span, versions, lag)
                context = span.get_span_context()
                if context.is_valid:
                    if trace_id is None:  # else the request's, which is this span's trace
                        trace_id = format(context.trace_id, "032x")
                    sampled = context.trace_flags.sampled
            tail = tail_sampling.sampler
            if tail is not None and sampled and trace_id is not None:
                sampled = tail.decide(
                    _attempt_end(trace_id, error, result, reward, lag, self._clock, t0)
                )
        else:
            if gate.tracing:
                with _span_helpers().outside_owned_job():
                    answer = await _post(post, server, url, body, self._timeout, headers)
            else:
                answer = await _post(post, server, url, body, self._timeout, headers)
            reward, result, error, trace_id = interpret(answer, server)
        if error is not None and error.transient and rotation is not None:
            rotation.note_unreachable(server)
        return AttemptOutcome(
            rollout_id,
            attempt,
            reward,
            result,
            error,
            trace_id,
            started_at,
            time.perf_counter() - t0,
            sampled,
        )


def _attempt_end(
    trace_id: str,
    error: DispatchError | None,
    result: dict[str, Any] | None,
    reward: float | None,
    lag: int | None,
    clock: PolicyClock | None,
    t0: float,
) -> AttemptEnd:
    """What the tail sampler reads of an ended attempt: a timeout, a failure (an incomplete
    model answer counts as one), a lag over ``max_staleness``, its duration and reward."""
    usage = result.get(USAGE_KEY) if result is not None else None
    incomplete = isinstance(usage, Mapping) and bool(usage.get("incomplete_calls"))
    return AttemptEnd(
        trace_id,
        timed_out=error is not None and error.kind == "timeout",
        failed=(error is not None and error.kind != "timeout") or incomplete,
        stale=clock is not None and clock.too_stale(lag),
        duration_s=time.perf_counter() - t0,
        reward=reward,
    )


def _versions_in(result: dict[str, Any]) -> list[Any]:
    """The policy versions an answer's usage lists (for the span; the record takes them later)."""
    usage = result.get(USAGE_KEY)
    versions = usage.get("policy_versions") if isinstance(usage, dict) else None
    return versions if isinstance(versions, list) else []


@functools.cache
def _span_helpers() -> ModuleType:
    """``rollgym.telemetry.spans``, imported on the first traced attempt and never with tracing
    off; cached because an import statement here cost 1-2 µs per rollout (measured)."""
    from rollgym.telemetry import spans

    return spans


class PostJson(Protocol):
    """The seam between the dispatcher and the client: the part of
    :meth:`HttpClient.post_json` an attempt uses (server, URL, body, time limit, headers)."""

    def __call__(
        self,
        server: str,
        url: str,
        body: object,
        /,
        *,
        timeout: float,
        headers: Headers,
        route: str,
    ) -> Awaitable[HttpResponse]: ...


async def _post(
    post: PostJson,
    server: str,
    url: str,
    body: object,
    timeout: float,
    headers: Headers,
) -> HttpResponse | DispatchError:
    """The single POST ``/run`` of an attempt: its answer, or the error that ended it."""
    try:
        answer: HttpResponse = await post(
            server, url, body, timeout=timeout, headers=headers, route="/run"
        )
    except TransportError as exc:
        return transport_failure(exc)
    return answer


def transport_failure(exc: TransportError) -> DispatchError:
    """The driver's reading of a request that got no answer: worth another attempt, unless the
    client refused it itself (too large, a redirect to another host, a control character in
    the URL): that is permanent.

    The message stays the client's (it names the server, method and path); the kind says
    which: ``timeout`` or ``connection_error``; for a refusal ``request_too_large``,
    ``response_too_large``, ``redirect_refused`` or ``invalid_url``.
    """
    if isinstance(exc, ExchangeRefused):
        return PermanentDispatchError(str(exc), kind=exc.kind, server=exc.server)
    kind: ErrorKind = "timeout" if isinstance(exc, RequestTimeout) else "connection_error"
    return TransientDispatchError(str(exc), kind=kind, server=exc.server)


class Reading(NamedTuple):
    """What one exchange meant: a reward and the answer, or the error; and its trace id."""

    reward: float | None
    result: dict[str, Any] | None
    error: DispatchError | None
    trace_id: str | None


def interpret(answer: HttpResponse | DispatchError, server: str) -> Reading:
    """The reading of one exchange, or of the error that ended it."""
    if isinstance(answer, DispatchError):
        return Reading(None, None, answer, None)
    try:
        reward, result = classify(answer, server)
    except DispatchError as exc:
        exc.detail = failure_detail(answer.data)  # the failure's own frames, partial trajectory
        return Reading(None, None, exc, answer.trace_id)
    return Reading(reward, result, None, answer.trace_id)
