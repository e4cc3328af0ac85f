"""The environment base through the built-in envs, over real HTTP in-process."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.envs.arithmetic import ArithmeticEnv
from rollgym.builtins.envs.keychain import KeychainEnv, build_vault, followed
from rollgym.servers import Verdict
from rollgym.telemetry import names


def keychain(**options):
    return KeychainEnv.build("keys", options)


async def test_keychain_chain_must_be_followed_turn_by_turn(serving, client):
    async with serving(keychain()) as url:
        seeded = (
            await client.post_json(
                "keys", url + "/seed_session", {"rollout_id": "7-0", "task": {"seed": 5, "hops": 4}}
            )
        ).data
        assert seeded["tools"][0]["function"]["name"] == "read_key"
        start = seeded["messages"][-1]["content"].split("Start key: ")[1].split()[0]
        key, outputs = start, []
        for _ in range(4):
            out = await client.post_json(
                "keys",
                url + "/tools/read_key",
                {"session_id": seeded["session_id"], "arguments": {"key": key}},
            )
            outputs.append(out.data["output"])
            key = out.data["output"].split(": ")[1]
        assert outputs[-1].startswith("secret: ") and all(
            o.startswith("next key: ") for o in outputs[:-1]
        )
        verdict = await client.post_json(
            "keys",
            url + "/verify",
            {"session_id": seeded["session_id"], "answer": f"Answer: {key}"},
        )
        assert verdict.data["reward"] == 1.0
        assert verdict.data["details"]["chain_followed"] is True
        # the session ended with verification
        again = await client.post_json(
            "keys", url + "/verify", {"session_id": seeded["session_id"], "answer": key}
        )
        assert again.status == 404 and again.data["field"] == "session_id"
        metrics = (await client.post_json("keys", url + "/aggregate_metrics", {})).data
    assert metrics["count"] == 1 and metrics["mean_reward"] == 1.0 and metrics["pass_rate"] == 1.0
    assert metrics["tool_calls"] == {"read_key": 4}
    assert metrics["open_sessions"] == 0


async def test_keychain_guessed_secret_without_reads_gets_zero(serving, client):
    vault = build_vault(5, 4, 2)
    async with serving(keychain()) as url:
        seeded = (
            await client.post_json("keys", url + "/seed_session", {"task": {"seed": 5, "hops": 4}})
        ).data
        verdict = await client.post_json(
            "keys", url + "/verify", {"session_id": seeded["session_id"], "answer": vault.secret}
        )
    assert verdict.data["reward"] == 0.0
    assert verdict.data["details"] == {
        "correct_secret": True,
        "chain_followed": False,
        "reads": 0,
        "hops": 4,
    }


def test_vault_is_deterministic_and_followed_checks_order():
    assert build_vault(9, 3, 2) == build_vault(9, 3, 2)
    assert build_vault(9, 3, 2).secret != build_vault(10, 3, 2).secret
    chain = ("a", "b", "c")
    assert followed(chain, ["a", "x", "b", "c"])
    assert not followed(chain, ["b", "a", "c"])


async def test_protocol_errors_name_the_field(serving, client):
    async with serving(keychain()) as url:
        bad_task = await client.post_json("keys", url + "/seed_session", {"task": {"seed": "five"}})
        too_many = await client.post_json(
            "keys", url + "/seed_session", {"task": {"seed": 1, "hops": 1000}}
        )
        no_task = await client.post_json("keys", url + "/seed_session", {"rollout_id": "x"})
        sid = (await client.post_json("keys", url + "/seed_session", {"task": {"seed": 1}})).data[
            "session_id"
        ]
        unknown_tool = await client.post_json(
            "keys", url + "/tools/open_safe", {"session_id": sid, "arguments": {}}
        )
        bad_args = await client.post_json(
            "keys", url + "/tools/read_key", {"session_id": sid, "arguments": {"door": 1}}
        )
        unknown_session = await client.post_json(
            "keys", url + "/tools/read_key", {"session_id": "nope", "arguments": {"key": "k"}}
        )
        missing_key = await client.post_json(
            "keys", url + "/tools/read_key", {"session_id": sid, "arguments": {"key": "k-0"}}
        )
    assert (bad_task.status, bad_task.data["field"]) == (400, "task")
    assert "'seed' must be an integer" in bad_task.data["error"]
    assert too_many.status == 400 and "hops" in too_many.data["error"]
    assert (no_task.status, no_task.data["field"]) == (400, "body.task")
    assert (unknown_tool.status, unknown_tool.data["field"]) == (404, "tool")
    assert bad_args.status == 400 and bad_args.data["field"].startswith("arguments.")
    assert (unknown_session.status, unknown_session.data["field"]) == (404, "session_id")
    assert missing_key.status == 200 and missing_key.data["output"].startswith(
        "error: there is no key"
    )


async def test_sessions_expire(serving, client):
    import asyncio

    async with serving(keychain(session_ttl_s=0.05)) as url:
        sid = (await client.post_json("keys", url + "/seed_session", {"task": {"seed": 1}})).data[
            "session_id"
        ]
        await asyncio.sleep(0.1)
        late = await client.post_json("keys", url + "/verify", {"session_id": sid, "answer": "x"})
    assert late.status == 404 and "expired" in late.data["error"]


async def test_arithmetic_exact_answers(serving, client):
    async with serving(ArithmeticEnv.build("arith", {})) as url:

        async def score(task, answer):
            seeded = (await client.post_json("arith", url + "/seed_session", {"task": task})).data
            verdict = await client.post_json(
                "arith", url + "/verify", {"session_id": seeded["session_id"], "answer": answer}
            )
            return verdict.data["reward"]

        assert await score({"question": "12 + 7 * 3"}, "Answer: 33") == 1.0
        assert await score({"question": "12 + 7 * 3"}, "The answer: 34.") == 0.0
        assert await score({"a": 1, "b": 3, "op": "div"}, "answer: 0.333333") == 1.0
        assert await score({"a": 1, "b": 3, "op": "/"}, "0.33") == 0.0
        assert await score({"question": "2 * (3 - 5)"}, "-4") == 1.0
        assert await score({"question": "1+1"}, None) == 0.0
        refused = await client.post_json(
            "arith", url + "/seed_session", {"task": {"question": "__import__('os')"}}
        )
        zero = await client.post_json("arith", url + "/seed_session", {"task": {"question": "1/0"}})
    assert refused.status == 400 and zero.status == 400 and "division by zero" in zero.data["error"]


async def test_tool_and_verify_spans_carry_the_sessions_rollout_id(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(keychain()) as url:
        seeded = (
            await client.post_json(
                "keys",
                url + "/seed_session",
                {"rollout_id": "12-3", "task": {"seed": 2, "hops": 1}},
            )
        ).data
        await client.post_json(
            "keys",
            url + "/tools/read_key",
            {"session_id": seeded["session_id"], "arguments": {"key": "k-1"}},
        )
        await client.post_json(
            "keys", url + "/verify", {"session_id": seeded["session_id"], "answer": "x"}
        )
    by_name = {span.name: span for span in exporter.get_finished_spans()}
    assert by_name[names.SPAN_ENV_TOOL].attributes[names.ROLLOUT_ID] == "12-3"
    assert by_name[names.SPAN_ENV_TOOL].attributes[names.ENV_TOOL_NAME] == "read_key"
    assert by_name[names.SPAN_VERIFY].attributes[names.ROLLOUT_ID] == "12-3"
    assert by_name[names.SPAN_ENV_SEED].attributes[names.ROLLOUT_ID] == "12-3"
    # each sits under the HTTP server span of its own request
    servers = {
        s.context.span_id for s in exporter.get_finished_spans() if s.name.startswith("POST /")
    }
    assert by_name[names.SPAN_ENV_TOOL].parent.span_id in servers


class _SeenRollout(ArithmeticEnv):
    """Arithmetic, keeping the rollout each seed was for (what seeding_rollout_id tells)."""

    async def seed(self, task):
        state = await super().seed(task)
        state.data["seen_rollout"] = self.seeding_rollout_id()
        return state

    async def verify(self, state, answer):
        return Verdict(reward=0.0, details={"seen_rollout": state.data["seen_rollout"]})


async def test_seed_is_told_the_rollout_it_seeds_and_only_inside_seed(serving, client):
    env = _SeenRollout.build("calc", {})
    async with serving(env) as url:
        seen = []
        for body in (
            {"rollout_id": "9-1", "task": {"question": "1+2"}},
            {"task": {"question": "3*4"}},
        ):
            seeded = (await client.post_json("calc", url + "/seed_session", body)).data
            verdict = await client.post_json(
                "calc", url + "/verify", {"session_id": seeded["session_id"], "answer": "x"}
            )
            seen.append(verdict.data["details"]["seen_rollout"])
    assert seen == ["9-1", None]
    assert env.seeding_rollout_id() is None  # outside seed: no rollout is being seeded


class _NumpyVerdicts(ArithmeticEnv):
    """Arithmetic whose verify computes its reward with NumPy (a float32) and its details too."""

    async def verify(self, state, answer):
        np = pytest.importorskip("numpy")
        return Verdict(reward=np.float32(0.75), details={"scores": np.array([1, 0])})


async def test_a_verdict_computed_with_numpy_is_answered_as_its_numbers(serving, client):
    async with serving(_NumpyVerdicts.build("calc", {})) as url:
        body = {"task": {"question": "1+2"}}
        seeded = (await client.post_json("calc", url + "/seed_session", body)).data
        verdict = await client.post_json(
            "calc", url + "/verify", {"session_id": seeded["session_id"], "answer": "3"}
        )
    assert verdict.status == 200, verdict.data
    assert verdict.data["reward"] == 0.75 and verdict.data["details"] == {"scores": [1, 0]}
