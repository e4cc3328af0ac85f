"""Names, kinds, attributes and parentage of every span helper; none of them raises."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from rollgym.telemetry import spans
from rollgym.telemetry.context import current_carrier, current_trace_id, extract_context


def test_startup_tree(named):
    with spans.startup_span():
        with spans.server_startup_span("policy", "model", "http://127.0.0.1:8123"):
            pass
        with spans.server_startup_span("env", "environment", None):
            pass
    (root,) = named("gym.startup")
    policy, env = named("gym.server.startup")
    assert root.parent is None
    assert policy.parent.span_id == root.context.span_id
    assert policy.attributes["gym.server.name"] == "policy"
    assert policy.attributes["gym.server.kind"] == "model"
    assert policy.attributes["gym.server.address"] == "http://127.0.0.1:8123"
    assert policy.attributes["server.address"] == "127.0.0.1"
    assert policy.attributes["server.port"] == 8123
    assert "gym.server.address" not in env.attributes


def test_server_address_recorded_once_healthy(named):
    with spans.server_startup_span("agent", "agent", None) as span:
        spans.record_server_address(span, "http://127.0.0.1:9321")
    with spans.server_startup_span("odd", "agent", None) as span:
        spans.record_server_address(span, "http://127.0.0.1:notaport")  # never raises
    agent, odd = named("gym.server.startup")
    assert agent.attributes["gym.server.address"] == "http://127.0.0.1:9321"
    assert agent.attributes["server.address"] == "127.0.0.1"
    assert agent.attributes["server.port"] == 9321
    assert odd.attributes["gym.server.address"] == "http://127.0.0.1:notaport"
    assert "server.port" not in odd.attributes


def test_job_children(named):
    with spans.job_span("run-9"):
        with spans.aggregate_metrics_span("env"):
            pass
        with spans.finalize_span():
            pass
    (job,) = named("gym.job")
    (agg,) = named("gym.job.aggregate_metrics")
    (fin,) = named("gym.job.finalize")
    assert job.attributes["gym.run.id"] == "run-9"
    assert agg.parent.span_id == job.context.span_id == fin.parent.span_id
    assert agg.attributes["gym.http.destination.server.name"] == "env"


def test_rollout_model_env_verify(named):
    with spans.rollout_span("3-0") as r:
        with spans.model_chat_span("3-0", "sim-1", "rollgym") as m:
            spans.record_model_response(
                m,
                {
                    "id": "chatcmpl-3-0.0",
                    "choices": [{"finish_reason": "tool_calls"}, {"finish_reason": None}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 5},
                },
            )
        with spans.env_seed_span("3-0"):
            pass
        with spans.env_tool_span("3-0", "search"):
            pass
        with spans.verify_span("3-0"):
            pass
        with spans.rollout_span(None) as anonymous:
            pass
    (model,) = named("gym.model.chat")
    assert model.kind is SpanKind.CLIENT
    assert model.attributes["gen_ai.operation.name"] == "chat"
    assert model.attributes["gen_ai.provider.name"] == "rollgym"
    assert model.attributes["gen_ai.request.model"] == "sim-1"
    assert model.attributes["gen_ai.response.id"] == "chatcmpl-3-0.0"
    assert model.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert model.attributes["gen_ai.usage.input_tokens"] == 12
    assert model.attributes["gen_ai.usage.output_tokens"] == 5
    (tool,) = named("gym.env.tool")
    assert tool.attributes["gym.env.tool.name"] == "search"
    for name in ("gym.model.chat", "gym.env.tool", "gym.verify", "gym.env.seed_session"):
        (s,) = named(name)
        assert s.attributes["gym.rollout.id"] == "3-0"
        assert s.parent.span_id == r.get_span_context().span_id
    assert (
        "gym.rollout.id"
        not in [
            s
            for s in named("gym.rollout")
            if s.context.span_id == anonymous.get_span_context().span_id
        ][0].attributes
    )


@pytest.mark.parametrize(
    "bad", [None, [], {"choices": "x", "usage": [1]}, {"usage": {"prompt_tokens": True}}]
)
def test_record_model_response_odd_shapes_never_raise(named, bad):
    with spans.model_chat_span(None, "m", "p") as m:
        spans.record_model_response(m, bad)  # type: ignore[arg-type]
    (s,) = named("gym.model.chat")
    assert "gen_ai.usage.input_tokens" not in s.attributes
    assert "gym.rollout.id" not in s.attributes


def test_engine_request_span_is_server_child_of_incoming_context(named):
    with spans.model_chat_span("3-0", "m", "p") as caller:
        carrier = current_carrier()
    assert carrier["traceparent"].split("-")[2] == format(caller.get_span_context().span_id, "016x")
    with (
        spans.http_server_span("POST", "/r/3-0/v1/chat/completions", carrier) as server,
        spans.engine_request_span("3-0.0", "m", "3-0") as engine,
    ):
        engine.set_attribute("gen_ai.latency.time_in_queue", 0.01)
    (llm,) = named("llm_request")
    assert llm.kind is SpanKind.SERVER
    assert llm.attributes["gen_ai.request.id"] == "chatcmpl-3-0.0"
    assert "gen_ai.request.model" not in llm.attributes  # vLLM's span names no model
    assert llm.attributes["gym.rollout.id"] == "3-0"
    assert llm.parent.span_id == server.get_span_context().span_id
    (srv,) = named("POST")
    assert srv.kind is SpanKind.SERVER
    assert srv.parent.span_id == caller.get_span_context().span_id and srv.parent.is_remote
    assert srv.attributes["http.request.method"] == "POST"
    assert srv.attributes["url.path"] == "/r/3-0/v1/chat/completions"


def test_http_server_span_without_traceparent_is_a_root(named):
    with spans.http_server_span("GET", "/health", {}):
        pass
    (s,) = named("GET")
    assert s.parent is None


def test_http_client_span_attributes_and_no_credentials(named):
    url = "http://user:secret@127.0.0.1:9000/r/3-0/v1/chat/completions?x=1#frag"
    with spans.http_client_span("POST", "policy", url, "/r/{rollout_id}/v1/chat/completions"):
        pass
    with spans.http_client_span("POST", "policy", "http://h/x", None):
        pass
    routed, bare = named("POST /r/{rollout_id}/v1/chat/completions") + named("POST")
    assert routed.kind is SpanKind.CLIENT
    assert routed.attributes["http.request.method"] == "POST"
    assert routed.attributes["server.address"] == "127.0.0.1"
    assert routed.attributes["server.port"] == 9000
    assert routed.attributes["url.full"] == (
        "http://REDACTED:REDACTED@127.0.0.1:9000/r/3-0/v1/chat/completions?x=1"
    )
    assert "secret" not in routed.attributes["url.full"]
    assert routed.attributes["gym.http.destination.server.name"] == "policy"
    assert "server.port" not in bare.attributes


def test_context_helpers(named):
    assert current_trace_id() is None
    assert current_carrier() == {}
    with spans.rollout_span("1-0") as r:
        assert current_trace_id() == format(r.get_span_context().trace_id, "032x")
        ctx = extract_context(current_carrier())
    assert trace.get_current_span(ctx).get_span_context().span_id == r.get_span_context().span_id
    assert extract_context({"traceparent": "garbage"}) is not None


def test_body_exception_propagates_and_is_recorded(named):
    with pytest.raises(KeyError), spans.verify_span("1-0"):
        raise KeyError("k")
    (s,) = named("gym.verify")
    assert s.status.status_code.name == "ERROR"
    assert s.events[0].name == "exception"
    assert trace.get_current_span().get_span_context().is_valid is False


class _BrokenTracer:
    def start_span(self, *a, **k):  # noqa: ANN002, ANN003
        raise RuntimeError("telemetry is broken")


def test_a_broken_tracer_never_reaches_the_caller(monkeypatch):
    from rollgym.telemetry._state import state

    monkeypatch.setattr(state, "tracer", _BrokenTracer())
    with spans.dispatch_span({"task_index": 1}, "a", "a") as span:
        spans.record_dispatch_outcome(span, "error", None)
        result = "work done"
    assert result == "work done"
    assert not span.is_recording()
