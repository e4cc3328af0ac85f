"""Every span rollgym opens, one helper each, with the trace-ownership (split) rule.

Callers gate BEFORE calling (``if gate.rollout: with dispatch_span(...)``), so these helpers are
only reached when the group is on and a trace exporter is active. Each one yields the span,
never raises into the caller's work (see :mod:`rollgym.telemetry.current_span`), and sets costly
attributes only when the span is recording.

The split rule (TELEMETRY.md): :func:`job_span` records, before opening ``gym.job``, whether a
valid span was already current. Only a standalone job is *owned*: its ``SpanContext`` sits in
``_OWNED_JOB_SPAN_CONTEXT`` for the duration. :func:`dispatch_span` opens a new trace root
linked to the job only when the current span IS that owned job; everywhere else (an embedder's
span, even a root; the job group off; a remote parent; a child of the job) it nests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from rollgym.identity import (
    ATTEMPT,
    EXPLICIT_ID,
    ROLLOUT_INDEX,
    TASK_INDEX,
    make_rollout_id,
    rollout_id_of,
)
from rollgym.policy_versions import ANSWER_KEY, PolicyVersion, is_version, version_range
from rollgym.telemetry import names, runtime_context
from rollgym.telemetry._state import state
from rollgym.telemetry.content_capture import (
    capture,
    captured_text,
    input_messages,
    output_messages,
)
from rollgym.telemetry.context import extract_context
from rollgym.telemetry.current_span import current_span, warn_once
from rollgym.telemetry.run_session import RUN_SESSION
from rollgym.url_origin import split_origin
from rollgym.urls import redact_url

#: ``SpanContext`` of the ``gym.job`` span this process opened as a standalone trace root, for
#: the duration of that job; None under an embedder's span or when no job span is open. When
#: the job span is unsampled it is still a valid context, and rollouts still link to it.
_OWNED_JOB_SPAN_CONTEXT: ContextVar[SpanContext | None] = ContextVar(
    "rollgym_owned_job_span_context", default=None
)


# --- run level -----------------------------------------------------------------------------------
def startup_span() -> AbstractContextManager[Span]:
    """``gym.startup``: launching all servers (a root in a standalone run)."""
    return current_span(names.SPAN_STARTUP)


def server_startup_span(name: str, kind: str, address: str | None) -> AbstractContextManager[Span]:
    """``gym.server.startup``: one server, from launch until it answers ``/health``."""
    attributes: dict[str, AttributeValue] = {names.SERVER_NAME: name, names.SERVER_KIND: kind}
    if address:
        attributes.update(_address_attributes(address))
    return current_span(names.SPAN_SERVER_STARTUP, attributes=attributes)


def record_server_address(span: Span, address: str) -> None:
    """The address of a launched server, known only once it is healthy (``gym.server.startup``)."""
    try:
        span.set_attributes(_address_attributes(address))
    except Exception:
        warn_once("recording a server address failed")


@contextmanager
def job_span(run_id: str) -> Iterator[Span]:
    """``gym.job``; owns the trace (see module docstring) only when nothing was current."""
    standalone = not trace.get_current_span().get_span_context().is_valid
    attributes: dict[str, AttributeValue] = {names.RUN_ID: run_id}
    session = RUN_SESSION.get()
    if session is not None:
        attributes[names.RUN_SESSION] = session
    with current_span(names.SPAN_JOB, attributes=attributes) as span:
        owned = span.get_span_context() if standalone else None
        token = _OWNED_JOB_SPAN_CONTEXT.set(owned if owned is not None and owned.is_valid else None)
        try:
            yield span
        finally:
            try:
                _OWNED_JOB_SPAN_CONTEXT.reset(token)
            except ValueError:  # reset from another Context (never in our call sites)
                _OWNED_JOB_SPAN_CONTEXT.set(None)


def owned_job_span_context() -> SpanContext | None:
    """The owned job's context, or None (for tests and ``rollgym traces check``)."""
    return _OWNED_JOB_SPAN_CONTEXT.get()


def aggregate_metrics_span(server_name: str) -> AbstractContextManager[Span]:
    """``gym.job.aggregate_metrics``: one environment's ``/aggregate_metrics`` call."""
    attributes = {names.DESTINATION_SERVER_NAME: server_name}
    return current_span(names.SPAN_AGGREGATE_METRICS, attributes=attributes)


def finalize_span() -> AbstractContextManager[Span]:
    """``gym.job.finalize``: writing the summary and closing the output files."""
    return current_span(names.SPAN_FINALIZE)


class EngineTimings(Protocol):
    """What an engine measured of one generation, in seconds from its arrival (the simulated
    engine's ``EngineTimings`` has it); a Protocol, so telemetry imports no engine."""

    @property
    def time_in_queue(self) -> float: ...
    @property
    def time_to_first_token(self) -> float: ...
    @property
    def e2e(self) -> float: ...


class ExecOutcome(Protocol):
    """The parts of a sandbox's ``ExecResult`` its exec span records (telemetry sits below
    the sandbox, so it names the shape, not the class)."""

    @property
    def exit_code(self) -> int: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def killed(self) -> bool: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def cpu_s(self) -> float: ...
    @property
    def stdout_bytes(self) -> int: ...
    @property
    def stderr_bytes(self) -> int: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def limit(self) -> str | None: ...


# --- one rollout -----------------------------------------------------------------------------------
def _row_rollout_id(row: Mapping[str, object]) -> str | None:
    """:func:`rollout_id_of`, with the driver's own rows (a dict of plain ints and an optional
    non-empty str) answered inline: every traced rollout derives its id here, and the general
    checks cost a dozen calls a rollout. Anything else takes the general path, so the answer
    is the same for every row (a test compares the two)."""
    if type(row) is dict:
        attempt = row.get(ATTEMPT)
        index = row.get(ROLLOUT_INDEX)
        if type(attempt) is int and type(index) is int and attempt >= 0 and index >= 0:
            explicit = row.get(EXPLICIT_ID)
            if explicit is None:
                task = row.get(TASK_INDEX)
                if type(task) is int and task >= 0:
                    return make_rollout_id(None, task, index, attempt)
            elif type(explicit) is str and explicit:
                return make_rollout_id(explicit, 0, index, attempt)
    return rollout_id_of(row)


def _dispatch_attributes(
    collector_row: Mapping[str, object], dispatch_name: str, destination: str
) -> dict[str, AttributeValue]:
    """Identity from the collector row (never the posted body); omitted when underivable."""
    attributes: dict[str, AttributeValue] = {
        names.DISPATCH_NAME: dispatch_name,
        names.DESTINATION_SERVER_NAME: destination,
    }
    try:
        rollout_id = _row_rollout_id(collector_row)
        if rollout_id is not None:
            attributes[names.ROLLOUT_ID] = rollout_id
        attempt = collector_row.get(ATTEMPT)
        if type(attempt) is int or (isinstance(attempt, int) and not isinstance(attempt, bool)):
            attributes[names.ROLLOUT_ATTEMPT] = attempt
        session = RUN_SESSION.get()
        if session is not None:
            attributes[names.RUN_SESSION] = session
    except Exception:
        warn_once("deriving rollout identity for a dispatch span failed")
    return attributes


def dispatch_span(
    collector_row: Mapping[str, object], dispatch_name: str, destination: str
) -> AbstractContextManager[Span]:
    """``gym.rollout.dispatch``: a new root linked to the owned job, else nested (module doc)."""
    owned = _OWNED_JOB_SPAN_CONTEXT.get()
    parent: Context | None = None
    links: list[Link] | None = None
    if owned is not None:  # only then is the current span worth looking up
        current = runtime_context.current_span().get_span_context()
        if current.is_valid and current == owned:
            parent, links = Context(), [Link(owned)]
    attributes = _dispatch_attributes(collector_row, dispatch_name, destination)
    return current_span(names.SPAN_DISPATCH, attributes=attributes, context=parent, links=links)


class outside_owned_job:  # noqa: N801 - used like a function: ``with outside_owned_job():``
    """With the ``rollout`` group off, step out of the owned ``gym.job`` span for one attempt.

    What would have been a child of the dispatch span (the driver's HTTP client span, the
    ``traceparent`` sent on ``/run``) then starts a fresh root instead of joining the job's
    trace: presets choose which spans exist, never the trace shape. Anywhere else (an
    embedder's span, a job that is not owned) the current context is left as it is, so the
    attempt nests there, exactly as the dispatch span would have. Baggage is kept.
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: object | None = None

    def __enter__(self) -> None:
        owned = _OWNED_JOB_SPAN_CONTEXT.get()
        if owned is None:
            return
        try:
            if trace.get_current_span().get_span_context() == owned:
                self._token = context_api.attach(trace.set_span_in_context(INVALID_SPAN))
        except Exception:
            warn_once("leaving the job span for a rollout failed")

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            try:
                context_api.detach(self._token)  # type: ignore[arg-type]
            except Exception:
                warn_once("returning to the job span after a rollout failed")


def record_dispatch_outcome(span: Span, outcome: str, reward: float | None) -> None:
    """Outcome (``ok`` / ``error`` / ``timeout``) and reward; error status unless ``ok``."""
    try:
        if not span.is_recording():
            return
        # One call: the SDK takes the span's lock once for the whole mapping.
        if reward is None:
            span.set_attributes({names.ROLLOUT_OUTCOME: outcome})
        else:
            span.set_attributes(
                {names.ROLLOUT_OUTCOME: outcome, names.ROLLOUT_REWARD: float(reward)}
            )
        if outcome != names.OUTCOME_OK:
            span.set_status(Status(StatusCode.ERROR, outcome))
    except Exception:
        warn_once("recording a dispatch outcome failed")


def record_dispatch_versions(
    span: Span, versions: Sequence[PolicyVersion], lag: int | None = None
) -> None:
    """``gym.policy.version.min`` / ``.max`` over the policy versions of an attempt's calls,
    and ``gym.policy.lag`` where the driver knows the current version."""
    try:
        if not versions or not span.is_recording():
            return
        low, high = version_range(versions)
        attributes: dict[str, AttributeValue] = {
            names.POLICY_VERSION_MIN: low,
            names.POLICY_VERSION_MAX: high,
        }
        if lag is not None:
            attributes[names.POLICY_LAG] = lag
        span.set_attributes(attributes)
    except Exception:
        warn_once("recording a dispatch's policy versions failed")


def _rollout_attrs(rollout_id: str | None) -> dict[str, AttributeValue] | None:
    return {names.ROLLOUT_ID: rollout_id} if rollout_id else None


def rollout_span(
    rollout_id: str | None, agent_name: str | None = None
) -> AbstractContextManager[Span]:
    """``gym.rollout``: the rollout itself, in the server that performs it; in the GenAI
    conventions an ``invoke_agent`` of ``agent_name`` (the server playing it) whose
    conversation is the rollout, so agent-aware backends show it as one agent's session."""
    attributes: dict[str, AttributeValue] = {
        names.GEN_AI_OPERATION_NAME: names.GEN_AI_OPERATION_INVOKE_AGENT
    }
    if agent_name:
        attributes[names.GEN_AI_AGENT_NAME] = agent_name
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
        attributes[names.GEN_AI_CONVERSATION_ID] = rollout_id
    return current_span(names.SPAN_ROLLOUT, attributes=attributes)


def model_chat_span(
    rollout_id: str | None, model: str, provider: str
) -> AbstractContextManager[Span]:
    """``gym.model.chat``: one model call, caller side (GenAI client conventions); its
    conversation is the rollout's."""
    attributes = _genai_attributes(names.GEN_AI_OPERATION_CHAT, model, provider)
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
        attributes[names.GEN_AI_CONVERSATION_ID] = rollout_id
    return current_span(names.SPAN_MODEL_CHAT, kind=SpanKind.CLIENT, attributes=attributes)


def start_model_chat_span(rollout_id: str | None, model: str, provider: str) -> Span:
    """``gym.model.chat`` started under the current span but not made current, for a call
    whose answer outlives the code that sent it (a stream the agent reads later): the caller
    ends it once the answer is whole. Never raises (the invalid span on a telemetry fault)."""
    attributes = _genai_attributes(names.GEN_AI_OPERATION_CHAT, model, provider)
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
    try:
        return state.tracer.start_span(
            names.SPAN_MODEL_CHAT, kind=SpanKind.CLIENT, attributes=attributes
        )
    except Exception:
        warn_once("starting a model span failed")
        return INVALID_SPAN


def _genai_attributes(operation: str, model: str, provider: str) -> dict[str, AttributeValue]:
    return {
        names.GEN_AI_OPERATION_NAME: operation,
        names.GEN_AI_PROVIDER_NAME: provider,
        names.GEN_AI_REQUEST_MODEL: model,
    }


def genai_span(
    rollout_id: str | None,
    model: str,
    provider: str,
    *,
    upstream: bool,
    operation: str = names.GEN_AI_OPERATION_CHAT,
) -> AbstractContextManager[Span]:
    """The model server's own span, named as the GenAI conventions name one: ``chat <model>``.

    ``gym.model.chat`` (the agent's side) keeps its contract name; this is the span a GenAI
    backend groups by operation and model. Kind CLIENT when the server forwards to an
    ``upstream`` engine (the ``openai`` proxy), INTERNAL when it answers in-process (the
    simulated policy), as the conventions say for a remote versus a local model.
    """
    attributes = _genai_attributes(operation, model, provider)
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
        attributes[names.GEN_AI_CONVERSATION_ID] = rollout_id
    kind = SpanKind.CLIENT if upstream else SpanKind.INTERNAL
    return current_span(f"{operation} {model}", kind=kind, attributes=attributes)


def record_model_response(span: Span, response_json: Mapping[str, object]) -> None:
    """``gen_ai.response.*`` and usage from an OpenAI-style answer; silent on odd shapes."""
    try:
        if not span.is_recording() or not isinstance(response_json, Mapping):
            return
        response_id = response_json.get("id")
        if isinstance(response_id, str):
            span.set_attribute(names.GEN_AI_RESPONSE_ID, response_id)
        response_model = response_json.get("model")
        if isinstance(response_model, str):
            span.set_attribute(names.GEN_AI_RESPONSE_MODEL, response_model)
        version = response_json.get(ANSWER_KEY)
        if is_version(version):
            span.set_attribute(names.POLICY_VERSION, version)
        choices = response_json.get("choices")
        if isinstance(choices, list):
            reasons = [
                str(c["finish_reason"])
                for c in choices
                if isinstance(c, Mapping) and c.get("finish_reason") is not None
            ]
            if reasons:
                span.set_attribute(names.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
        usage = response_json.get("usage")
        if isinstance(usage, Mapping):
            for key, attr in (
                ("prompt_tokens", names.GEN_AI_USAGE_INPUT_TOKENS),
                ("input_tokens", names.GEN_AI_USAGE_INPUT_TOKENS),
                ("completion_tokens", names.GEN_AI_USAGE_OUTPUT_TOKENS),
                ("output_tokens", names.GEN_AI_USAGE_OUTPUT_TOKENS),
            ):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    span.set_attribute(attr, value)
    except Exception:
        warn_once("recording a model response failed")


def record_upstream_request(
    span: Span, request_id: str | None, sent_id: str | None, first_token_s: float | None
) -> None:
    """A proxy's model span: which request id went upstream in place of which (the mapping
    from an engine's own id back to the rollout) and, when streaming, time to first token."""
    try:
        if not span.is_recording():
            return
        attributes: dict[str, AttributeValue] = {}
        if request_id:
            attributes[names.MODEL_REQUEST_ID] = request_id
        if sent_id:
            attributes[names.MODEL_UPSTREAM_REQUEST_ID] = sent_id
        if first_token_s is not None:
            attributes[names.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN] = first_token_s
        span.set_attributes(attributes)
    except Exception:
        warn_once("recording an upstream request failed")


def engine_request_span(
    request_id: str, model: str, rollout_id: str | None
) -> AbstractContextManager[Span]:
    """``llm_request`` (kind SERVER), shaped like vLLM's: the engine's side of one generation.

    A child of the current (incoming) context. Its attributes are vLLM's (recorded from a real
    vLLM in ``tests/unit/servers/vllm_shape.json`` and held to it by a test): the request id as
    vLLM forms it (``chatcmpl-<X-Request-Id>``) here, then :func:`record_engine_request` and
    :func:`record_engine_timings`. vLLM's span names no model, so ``model`` is not recorded;
    ``gym.rollout.id`` is the one attribute vLLM cannot have.
    """
    attributes: dict[str, AttributeValue] = {names.GEN_AI_REQUEST_ID: f"chatcmpl-{request_id}"}
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
    return current_span(names.SPAN_ENGINE_REQUEST, kind=SpanKind.SERVER, attributes=attributes)


def record_engine_request(
    span: Span,
    *,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    n: int | None,
) -> None:
    """The sampling parameters of one generation, as vLLM records them: the value in effect
    (temperature, top_p and n default to 1), each only when truthy (vLLM leaves out a
    temperature of 0), max_tokens only when the request set it."""
    try:
        if not span.is_recording():
            return
        values = (
            (names.GEN_AI_REQUEST_TOP_P, 1.0 if top_p is None else float(top_p)),
            (names.GEN_AI_REQUEST_MAX_TOKENS, max_tokens),
            (names.GEN_AI_REQUEST_TEMPERATURE, 1.0 if temperature is None else float(temperature)),
            (names.GEN_AI_REQUEST_N, 1 if n is None else n),
        )
        span.set_attributes({key: value for key, value in values if value})
    except Exception:
        warn_once("recording engine request parameters failed")


def record_engine_timings(
    span: Span, timings: EngineTimings, usage: Mapping[str, object] | None
) -> None:
    """Latency (``gen_ai.latency.*``, seconds) and token usage of one engine generation.

    ``timings`` has ``time_in_queue``, ``time_to_first_token`` and ``e2e`` (each from arrival);
    the model-time split is derived as vLLM derives it: prefill from scheduling to the first
    token, decode from the first token to the last, inference both. Token counts go under
    vLLM's names (``gen_ai.usage.prompt_tokens``, ``completion_tokens``). Silent on odd shapes.
    """
    try:
        if not span.is_recording():
            return
        queue = float(timings.time_in_queue)
        first_token = float(timings.time_to_first_token)
        e2e = float(timings.e2e)
        attributes: dict[str, AttributeValue] = {
            names.GEN_AI_LATENCY_TIME_IN_QUEUE: queue,
            names.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: first_token,
            names.GEN_AI_LATENCY_E2E: e2e,
            names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: first_token - queue,
            names.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: e2e - first_token,
            names.GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE: e2e - queue,
        }
        if isinstance(usage, Mapping):
            for key, attr in (
                ("prompt_tokens", names.GEN_AI_USAGE_PROMPT_TOKENS),
                ("completion_tokens", names.GEN_AI_USAGE_COMPLETION_TOKENS),
            ):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    attributes[attr] = value
        span.set_attributes(attributes)
    except Exception:
        warn_once("recording engine timings failed")


def env_seed_span(rollout_id: str | None) -> AbstractContextManager[Span]:
    """``gym.env.seed_session``: an environment creating a session for a rollout."""
    return current_span(names.SPAN_ENV_SEED, attributes=_rollout_attrs(rollout_id))


def env_tool_span(
    rollout_id: str | None, tool_name: str, call_id: str | None = None
) -> AbstractContextManager[Span]:
    """``gym.env.tool``: one tool call, environment server side; in the GenAI conventions an
    ``execute_tool`` of ``tool_name``, with the model's ``call_id`` where the caller sent it."""
    attributes: dict[str, AttributeValue] = {
        names.ENV_TOOL_NAME: tool_name,
        names.GEN_AI_OPERATION_NAME: names.GEN_AI_OPERATION_EXECUTE_TOOL,
        names.GEN_AI_TOOL_NAME: tool_name,
    }
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
    if call_id:
        attributes[names.GEN_AI_TOOL_CALL_ID] = call_id
    return current_span(names.SPAN_ENV_TOOL, attributes=attributes)


def record_tool_call(span: Span, arguments: object, result: object) -> None:
    """Set a tool span's ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``, each
    cut to the capture limit, only when content capture is on (it may hold secrets)."""
    if capture.content:
        _set_content(
            span,
            lambda: {
                names.GEN_AI_TOOL_CALL_ARGUMENTS: captured_text(arguments),
                names.GEN_AI_TOOL_CALL_RESULT: captured_text(result),
            },
            "a tool call's arguments and result",
        )


def record_model_messages(
    span: Span, messages: Sequence[object], answer: Mapping[str, object]
) -> None:
    """Set a model span's ``gen_ai.input.messages`` and ``gen_ai.output.messages`` (each text
    cut to the capture limit), only when content capture is on."""
    if capture.content:
        _set_content(
            span,
            lambda: {
                names.GEN_AI_INPUT_MESSAGES: input_messages(messages),
                names.GEN_AI_OUTPUT_MESSAGES: output_messages(answer),
            },
            "a model call's messages",
        )


def _set_content(
    span: Span, content: Callable[[], Mapping[str, AttributeValue]], what: str
) -> None:
    """Set the captured ``content`` attributes: building them walks user values (messages,
    tool results), so a failure there is warned once and never reaches the rollout."""
    try:
        span.set_attributes(content())
    except Exception:
        warn_once(f"recording {what} failed")


def record_tool_model_error(span: Span, kind: str) -> None:
    """Mark a tool span as answered with the model's mistake ``kind``: an attribute, not an
    error status, since the environment served the call as it should."""
    try:
        span.set_attribute(names.ENV_TOOL_MODEL_ERROR, kind)
    except Exception:
        warn_once("recording a tool call's model error failed")


def verify_span(rollout_id: str | None) -> AbstractContextManager[Span]:
    """``gym.verify``: computing the reward, environment server side."""
    return current_span(names.SPAN_VERIFY, attributes=_rollout_attrs(rollout_id))


def record_evaluation(span: Span, reward: float) -> None:
    """The reward as a GenAI evaluation result on ``gym.verify``: the event
    ``gen_ai.evaluation.result`` and the same attributes on the span itself (some backends
    drop span events)."""
    try:
        if not span.is_recording():
            return
        attributes: dict[str, AttributeValue] = {
            names.GEN_AI_EVALUATION_NAME: names.GEN_AI_EVALUATION_REWARD,
            names.GEN_AI_EVALUATION_SCORE_VALUE: float(reward),
        }
        span.set_attributes(attributes)
        span.add_event(names.GEN_AI_EVALUATION_RESULT, attributes)
    except Exception:
        warn_once("recording a verification's reward failed")


# --- sandbox -----------------------------------------------------------------------------------------
def _sandbox_attrs(rollout_id: str | None, sandbox_id: str) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {names.SANDBOX_ID: sandbox_id}
    if rollout_id:
        attributes[names.ROLLOUT_ID] = rollout_id
    return attributes


def sandbox_create_span(rollout_id: str | None) -> AbstractContextManager[Span]:
    """``gym.sandbox.create``: a rollout getting its sandbox (from the warm pool or made now)."""
    return current_span(names.SPAN_SANDBOX_CREATE, attributes=_rollout_attrs(rollout_id))


def record_sandbox_created(span: Span, sandbox_id: str, warm: bool) -> None:
    try:
        span.set_attributes({names.SANDBOX_ID: sandbox_id, names.SANDBOX_WARM: warm})
    except Exception:
        warn_once("recording a sandbox creation failed")


def sandbox_exec_span(
    rollout_id: str | None, sandbox_id: str, command: str
) -> AbstractContextManager[Span]:
    """``gym.sandbox.exec``: one command run in a sandbox (``command``: the program's name)."""
    attributes = _sandbox_attrs(rollout_id, sandbox_id)
    attributes[names.SANDBOX_COMMAND] = command
    return current_span(names.SPAN_SANDBOX_EXEC, attributes=attributes)


def record_sandbox_exec(span: Span, result: ExecOutcome) -> None:
    """Exit code, limit flags, durations and output sizes of an :class:`ExecResult`."""
    try:
        if not span.is_recording():
            return
        attributes: dict[str, AttributeValue] = {
            names.SANDBOX_EXIT_CODE: result.exit_code,
            names.SANDBOX_TIMED_OUT: result.timed_out,
            names.SANDBOX_KILLED: result.killed,
            names.SANDBOX_WALL_TIME: result.wall_s,
            names.SANDBOX_CPU_TIME: result.cpu_s,
            names.SANDBOX_STDOUT_BYTES: result.stdout_bytes,
            names.SANDBOX_STDERR_BYTES: result.stderr_bytes,
            names.SANDBOX_OUTPUT_TRUNCATED: result.truncated,
        }
        if result.limit is not None:
            attributes[names.SANDBOX_LIMIT] = result.limit
        span.set_attributes(attributes)
    except Exception:
        warn_once("recording a sandbox exec failed")


def sandbox_destroy_span(rollout_id: str | None, sandbox_id: str) -> AbstractContextManager[Span]:
    """``gym.sandbox.destroy``: a rollout's sandbox removed, with every file it wrote."""
    return current_span(
        names.SPAN_SANDBOX_DESTROY, attributes=_sandbox_attrs(rollout_id, sandbox_id)
    )


# --- HTTP --------------------------------------------------------------------------------------------
#: Client-span attributes per (method, destination, url, route): the driver posts to the same
#: few URLs all run long, so parsing each URL once keeps the traced hot path short. Bounded,
#: because rollout-scoped model URLs are distinct per rollout.
_CLIENT_ATTRIBUTES: dict[tuple[str, str, str, str | None], dict[str, AttributeValue]] = {}
_CLIENT_ATTRIBUTES_MAX = 1024
#: The same per *origin* (plus the ``url.full`` of the origin alone), for a URL new to the
#: cache above: a rollout-scoped URL then costs one split and one dict, not a ``urlsplit``.
_ORIGIN_ATTRIBUTES: dict[
    tuple[str, str, str, str | None], tuple[dict[str, AttributeValue], str | None]
] = {}


def _client_attributes(
    method: str, destination: str, url: str, route: str | None
) -> dict[str, AttributeValue]:
    key = (method, destination, url, route)
    attributes = _CLIENT_ATTRIBUTES.get(key)
    if attributes is not None:
        return attributes
    split = split_origin(url)
    if split is None:
        attributes = _parsed_client_attributes(method, destination, url, route)
    else:
        origin, rest = split
        origin_key = (method, destination, origin, route)
        shared = _ORIGIN_ATTRIBUTES.get(origin_key)
        if shared is None:
            if len(_ORIGIN_ATTRIBUTES) >= _CLIENT_ATTRIBUTES_MAX:
                _ORIGIN_ATTRIBUTES.clear()
            base = _parsed_client_attributes(method, destination, origin, route)
            full = base.pop(names.URL_FULL, None)
            shared = _ORIGIN_ATTRIBUTES[origin_key] = (base, _as_str(full))
        base, origin_full = shared
        attributes = dict(base)
        if origin_full is not None:
            # urlunsplit of the whole URL is its origin's, then path and query as they are.
            attributes[names.URL_FULL] = origin_full + rest
    if len(_CLIENT_ATTRIBUTES) >= _CLIENT_ATTRIBUTES_MAX:
        _CLIENT_ATTRIBUTES.clear()
    _CLIENT_ATTRIBUTES[key] = attributes
    return attributes


def _as_str(value: AttributeValue | None) -> str | None:
    return value if isinstance(value, str) else None


def _parsed_client_attributes(
    method: str, destination: str, url: str, route: str | None
) -> dict[str, AttributeValue]:
    """The client span's attributes of ``url`` by ``urlsplit`` of the whole of it."""
    attributes: dict[str, AttributeValue] = {
        names.HTTP_REQUEST_METHOD: method,
        names.DESTINATION_SERVER_NAME: destination,
    }
    if route:
        attributes[names.URL_TEMPLATE] = route  # the span is named after it
    try:
        parts = urlsplit(url)
        if parts.hostname:
            attributes[names.SERVER_ADDRESS_HTTP] = parts.hostname
        if parts.port is not None:
            attributes[names.SERVER_PORT] = parts.port
        attributes[names.URL_FULL] = redact_url(
            urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        )
    except ValueError:
        pass
    return attributes


def http_client_span(
    method: str, destination: str, url: str, route: str | None
) -> AbstractContextManager[Span]:
    """Client span of one request (stable HTTP semconv); its context goes out as traceparent.

    Named ``"<METHOD> <route>"`` from the URL template, so a rollout-scoped URL never makes span
    names high-cardinality; ``url.full`` carries the concrete URL without credentials. The
    attribute mapping is shared between spans of the same URL: the SDK copies it on start.
    """
    name = f"{method} {route}" if route else method
    attributes = _client_attributes(method, destination, url, route)
    return current_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def http_server_span(
    method: str, path: str, headers: Mapping[str, str], scheme: str = "http"
) -> AbstractContextManager[Span]:
    """Server span of one request, child of the W3C context extracted from ``headers``.

    The middleware renames it to ``"<METHOD> <route>"`` and sets ``http.route`` and
    ``http.response.status_code`` once the app has matched and answered.
    """
    incoming = extract_context(headers)
    attributes = {names.HTTP_REQUEST_METHOD: method, names.URL_PATH: path, names.URL_SCHEME: scheme}
    return current_span(
        method, kind=SpanKind.SERVER, attributes=attributes, context=incoming, attach_to=incoming
    )


def _address_attributes(address: str) -> dict[str, AttributeValue]:
    """``gym.server.address`` plus ``server.address`` / ``server.port`` when they parse."""
    attributes: dict[str, AttributeValue] = {names.SERVER_ADDRESS: redact_url(address)}
    try:
        parts = urlsplit(address if "//" in address else f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return attributes
    if host:
        attributes[names.SERVER_ADDRESS_HTTP] = host
    if port is not None:
        attributes[names.SERVER_PORT] = port
    return attributes
