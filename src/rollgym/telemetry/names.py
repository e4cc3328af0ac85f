"""Every span name, attribute key and metric name rollgym emits, in one place.

Dashboards, trace queries and other programs depend on these strings (see TELEMETRY.md in the
docs); spans and metrics that describe the same thing use the same key, so a span-metrics
join never splits. Change one only with a migration note in ``docs/telemetry.md``.

The GenAI keys are our own string constants on purpose: the semantic-conventions package
marks them as moved between modules, and our names must not move with it.
"""

from __future__ import annotations

from typing import Final

# --- span names -------------------------------------------------------------------------------
SPAN_STARTUP: Final = "gym.startup"
SPAN_SERVER_STARTUP: Final = "gym.server.startup"
SPAN_JOB: Final = "gym.job"
SPAN_AGGREGATE_METRICS: Final = "gym.job.aggregate_metrics"
SPAN_FINALIZE: Final = "gym.job.finalize"
SPAN_DISPATCH: Final = "gym.rollout.dispatch"
SPAN_ROLLOUT: Final = "gym.rollout"
SPAN_MODEL_CHAT: Final = "gym.model.chat"
SPAN_ENV_TOOL: Final = "gym.env.tool"
SPAN_ENV_SEED: Final = "gym.env.seed_session"
SPAN_VERIFY: Final = "gym.verify"
SPAN_SANDBOX_CREATE: Final = "gym.sandbox.create"
SPAN_SANDBOX_EXEC: Final = "gym.sandbox.exec"
SPAN_SANDBOX_DESTROY: Final = "gym.sandbox.destroy"
#: The simulated engine's span, named like vLLM's so correlation is tested without a GPU.
SPAN_ENGINE_REQUEST: Final = "llm_request"

# --- resource attributes ------------------------------------------------------------------------
RUN_ID: Final = "gym.run.id"
SERVER_NAME: Final = "gym.server.name"
SERVER_KIND: Final = "gym.server.kind"
SERVER_ADDRESS: Final = "gym.server.address"
#: The standard resource attribute naming the emitting service (OTel semantic conventions).
SERVICE_NAME: Final = "service.name"

# --- rollout attributes (spans and metrics share these keys) ------------------------------------
ROLLOUT_ID: Final = "gym.rollout.id"
ROLLOUT_ATTEMPT: Final = "gym.rollout.attempt"
#: The run session (0, 1, ... in ``sessions.jsonl``) that made a dispatch: a rollout re-run
#: after Ctrl-C or a killed driver keeps its id and attempt, and is told apart by this.
RUN_SESSION: Final = "gym.run.session"
DISPATCH_NAME: Final = "gym.rollout.dispatch.name"
DESTINATION_SERVER_NAME: Final = "gym.http.destination.server.name"
ROLLOUT_REWARD: Final = "gym.rollout.reward"
ROLLOUT_OUTCOME: Final = "gym.rollout.outcome"
TELEMETRY_DROP_REASON: Final = "reason"
ENV_TOOL_NAME: Final = "gym.env.tool.name"
#: On a tool span: the model's mistake the call was answered with (``invalid_json``,
#: ``not_an_object``, ``invalid_arguments``, ``unknown_tool``); the span's status stays unset,
#: since the environment did not fail (``error.type`` is for spans that did).
ENV_TOOL_MODEL_ERROR: Final = "gym.env.tool.model_error"
#: On a dispatch span: seconds the attempt waited before it was sent (a server out of rotation).
ROLLOUT_ADMISSION_WAIT: Final = "gym.rollout.admission_wait"
#: On a model span: the policy version the call ran under (docs/policy-versions.md) ...
POLICY_VERSION: Final = "gym.policy.version"
#: ... on a dispatch span: the oldest and newest version among the attempt's model calls.
POLICY_VERSION_MIN: Final = "gym.policy.version.min"
POLICY_VERSION_MAX: Final = "gym.policy.version.max"
#: ... and how many versions the oldest call was behind the driver's current one at its end.
POLICY_LAG: Final = "gym.policy.lag"
#: On an HTTP client span: seconds it waited for a pooled connection (the metric's own name).
HTTP_CLIENT_QUEUE_DURATION: Final = "gym.http.client.queue_duration"
#: On a proxy's model span: the rollgym request id of the call (``<rollout id>.<turn>``) ...
MODEL_REQUEST_ID: Final = "gym.model.request_id"
#: ... and the id sent upstream in its place (the same, a UUID derived from it, or absent):
#: an engine span whose ``gen_ai.request.id`` holds this id belongs to that rollout.
MODEL_UPSTREAM_REQUEST_ID: Final = "gym.model.upstream_request_id"

# --- sandbox attributes (gym.sandbox.* spans) ---------------------------------------------------
SANDBOX_ID: Final = "gym.sandbox.id"
#: create: the sandbox came ready from the warm pool (False: made on the rollout's path).
SANDBOX_WARM: Final = "gym.sandbox.warm"
SANDBOX_COMMAND: Final = "gym.sandbox.command"
SANDBOX_EXIT_CODE: Final = "gym.sandbox.exit_code"
SANDBOX_TIMED_OUT: Final = "gym.sandbox.timed_out"
SANDBOX_KILLED: Final = "gym.sandbox.killed"
#: Which limit ended an exec: ``wall``, ``cpu`` or ``output`` (absent when none did).
SANDBOX_LIMIT: Final = "gym.sandbox.limit"
SANDBOX_WALL_TIME: Final = "gym.sandbox.wall_time_s"
SANDBOX_CPU_TIME: Final = "gym.sandbox.cpu_time_s"
SANDBOX_STDOUT_BYTES: Final = "gym.sandbox.stdout_bytes"
SANDBOX_STDERR_BYTES: Final = "gym.sandbox.stderr_bytes"
SANDBOX_OUTPUT_TRUNCATED: Final = "gym.sandbox.output_truncated"

OUTCOME_OK: Final = "ok"
OUTCOME_ERROR: Final = "error"
OUTCOME_TIMEOUT: Final = "timeout"

# --- GenAI semantic conventions (our own constants; see module docstring) ----------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_ID: Final = "gen_ai.request.id"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_LATENCY_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"
GEN_AI_LATENCY_E2E: Final = "gen_ai.latency.e2e"
# vLLM's own names on its ``llm_request`` span (its ``SpanAttributes``; the simulated engine's
# span uses the same): token counts under the older GenAI names, its model-time split and the
# sampling parameters of the request
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"
GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: Final = "gen_ai.latency.time_in_model_decode"
GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE: Final = "gen_ai.latency.time_in_model_inference"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_N: Final = "gen_ai.request.n"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
# Rollouts as agents (TELEMETRY.md's mapping): the agent, the conversation (= the rollout id),
# the tool call, and the reward as an evaluation result (an event and span attributes)
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
#: The tool call's arguments and result (only with content capture on, cut to its limit).
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
#: A model call's messages sent and answered (only with content capture on; JSON, role + parts).
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
#: ``gen_ai.evaluation.name`` of a rollout's verification: the environment's reward.
GEN_AI_EVALUATION_REWARD: Final = "reward"

# --- stable HTTP semantic conventions ---------------------------------------------------------
HTTP_REQUEST_METHOD: Final = "http.request.method"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
HTTP_ROUTE: Final = "http.route"
SERVER_ADDRESS_HTTP: Final = "server.address"
SERVER_PORT: Final = "server.port"
URL_FULL: Final = "url.full"
URL_PATH: Final = "url.path"
URL_SCHEME: Final = "url.scheme"
#: The URL template a client span is named after (``/r/{rollout_id}/v1/chat/completions``).
URL_TEMPLATE: Final = "url.template"
ERROR_TYPE: Final = "error.type"

#: ``gen_ai.operation.name`` of a chat completion, and the GenAI span-name form built on it.
GEN_AI_OPERATION_CHAT: Final = "chat"
#: ... of a rollout (``gym.rollout``): an agent invoked on one task ...
GEN_AI_OPERATION_INVOKE_AGENT: Final = "invoke_agent"
#: ... and of one tool call (``gym.env.tool``).
GEN_AI_OPERATION_EXECUTE_TOOL: Final = "execute_tool"

# --- headers ------------------------------------------------------------------------------------
HEADER_REQUEST_ID: Final = "X-Request-Id"

# --- metric names -------------------------------------------------------------------------------
METRIC_ROLLOUT_COMPLETED: Final = "gym.rollout.completed"
METRIC_ROLLOUT_REWARD: Final = "gym.rollout.reward"
METRIC_ROLLOUT_DURATION: Final = "gym.rollout.duration"
METRIC_ROLLOUT_IN_FLIGHT: Final = "gym.rollout.in_flight"
METRIC_HTTP_CLIENT_CONNECTIONS: Final = "gym.http.client.connections"
METRIC_HTTP_CLIENT_QUEUE_DURATION: Final = "gym.http.client.queue_duration"
METRIC_SPANS_DROPPED: Final = "gym.telemetry.spans.dropped"
METRIC_SANDBOX_POOL_SIZE: Final = "gym.sandbox.pool.size"
METRIC_SANDBOX_POOL_WAITING: Final = "gym.sandbox.pool.waiting"
METRIC_SANDBOX_EXEC_DURATION: Final = "gym.sandbox.exec.duration"
