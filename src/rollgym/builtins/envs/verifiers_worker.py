"""The process a verifiers environment runs in: ``python -m rollgym.builtins.envs.verifiers_worker``.

verifiers pins packages that rollgym's other extras need newer (``mcp<2`` and, through
openai-agents, ``websockets<17``, where openenv-core's fastmcp needs mcp 2), so it lives in a
Python of its own (``~/.cache/rollgym-verifiers/venv``, made by ``scripts/test.sh`` with the main
Python's packages visible beneath it). The ``impl: verifiers`` environment server starts this
worker with that Python and speaks to it in JSON lines: requests on the worker's stdin, events
on its stdout (the worker's own prints go to stderr, the server's log).

The worker loads the environment once, then plays each ``rollout`` it is sent, concurrently:
the environment's own ``rollout`` with verifiers' ``OpenAIChatCompletionsClient`` over an
``AsyncOpenAI`` whose transport sends each model call to the server as a ``model`` event and
waits for its ``answer`` (so every call goes through rollgym's model server, recorded there),
then the rubric's ``score_rollout``. The steps verifiers exposes (``setup_state``, a ToolEnv's
``call_tool``, a MultiTurnEnv's ``env_response``, the scoring) are reported as they ``begin`` and
``end``, so the server times them as spans. Stdin closing (the server gone) ends the worker.

Protocol (one JSON object a line):

- worker -> server: ``ready`` (``examples``: the dataset's size) or ``problem`` (``message``:
  why the environment did not load), then per rollout ``model`` (``id``, ``call``, ``body``),
  ``begin`` / ``end`` (``id``, ``step``, ``kind``, ``name``; ``end`` with what it produced), and
  ``done`` (``id``, ``result``) or ``failed`` (``id``, ``status``, ``step``, ``message``);
- server -> worker: ``rollout`` (``id``, ``input`` or ``example``, ``model``, ``sampling``),
  ``answer`` (``id``, ``call``, ``status``, ``body``), ``cancel`` (``id``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import itertools
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import IO, Any, TypedDict

#: What a rollout's model calls are posted to inside the worker (never reached: the transport
#: hands every request to the server instead).
BASE_URL = "http://rollgym-model.invalid/v1"
#: The kinds of step reported (the server names their spans).
SEED, TOOL, ENV_RESPONSE, SCORE = "seed", "tool", "env_response", "score"

#: An event this worker sends: a JSON object.
Event = dict[str, object]
#: A step method of a verifiers environment (all of them are coroutines).
Step = Callable[..., Awaitable[object]]
#: The ids of the tool calls a ToolEnv's ``env_response`` under way has passed to ``call_tool``.
REACHED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "verifiers_reached", default=None
)


class Details(TypedDict, total=False):
    """What the rubric and the rollout's end say besides the reward (the result's ``details``)."""

    metrics: dict[str, float]
    stop_condition: object
    turns: int
    is_truncated: bool
    error: str


class Scored(TypedDict):
    """A scored rollout: the ``done`` event's ``result``."""

    reward: float
    answer: str | None
    tool_calls: int
    details: Details


class Request(TypedDict, total=False):
    """A line the server sends: a ``rollout`` to play, a model call's ``answer``, a ``cancel``."""

    op: str
    id: int
    call: int
    input: dict[str, object]
    example: int
    model: str
    sampling: dict[str, object]
    status: int
    body: dict[str, object]


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def chain_text(error: BaseException) -> str:
    """An error and what caused it, on one line (verifiers' errors often say nothing)."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 4:
        text = one_line(seen)
        name = type(seen).__name__
        parts.append(name if text == name else f"{name}: {text}")
        seen = seen.__cause__ or seen.__context__
    return one_line(Exception(" <- ".join(parts)))


class Channel:
    """The JSON-lines pipe to the server: events out on the saved stdout, requests in."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out

    def send(self, event: Mapping[str, object]) -> None:
        self._out.write(json.dumps(event, default=str) + "\n")
        self._out.flush()


class Worker:
    """One loaded environment and the rollouts it is playing."""

    def __init__(self, env: Any, vf: Any, channel: Channel) -> None:
        self.env = env
        self.vf = vf
        self.channel = channel
        #: Model calls waiting for their answer, by (rollout id, call number).
        self.pending: dict[tuple[int, int], asyncio.Future[Request]] = {}
        self.playing: dict[int, asyncio.Task[None]] = {}
        self.calls = itertools.count()
        self.steps = itertools.count()
        self.examples: Any = None
        self.http = http_library()
        self._instrument()

    # --- steps, reported as they happen ---------------------------------------------------------

    def _instrument(self) -> None:
        """Wrap the instance's step methods (the class and the package stay as they are)."""
        env = self.env
        steps: list[tuple[str, str]] = [("setup_state", SEED)]
        steps.append(
            ("call_tool", TOOL)
            if isinstance(env, self.vf.ToolEnv)
            else ("env_response", ENV_RESPONSE)
        )
        for name, kind in steps:
            method = getattr(env, name, None)
            if callable(method):
                setattr(env, name, self._reported(kind, method))
        if isinstance(env, self.vf.ToolEnv) and callable(getattr(env, "env_response", None)):
            env.env_response = self._unreached_reported(env.env_response)

    def _reported(self, kind: str, method: Step) -> Step:
        @functools.wraps(method)
        async def step(*args: object, **kwargs: object) -> object:
            rollout = CURRENT.get()
            if rollout is None:
                return await method(*args, **kwargs)
            number = next(self.steps)
            begin: Event = {"op": "begin", "id": rollout, "step": number, "kind": kind}
            if kind == TOOL:
                begin["name"] = str(args[0] if args else kwargs.get("tool_name"))
                begin["call_id"] = args[2] if len(args) > 2 else kwargs.get("tool_call_id")
                arguments = args[1] if len(args) > 1 else kwargs.get("tool_args")
                reached = REACHED.get()
                if reached is not None:
                    reached.add(str(begin["call_id"]))
            elif kind == ENV_RESPONSE:
                messages = args[0] if args else kwargs.get("messages")
                said = message_text(messages[-1]) if isinstance(messages, list) and messages else ""
                arguments = {"message": said}
            else:
                arguments = None
            self.channel.send(begin)
            end: Event = {
                "op": "end",
                "id": rollout,
                "step": number,
                "arguments": arguments,
            }
            try:
                answer = await method(*args, **kwargs)
            except BaseException as exc:
                end["error"] = f"{type(exc).__name__}: {one_line(exc)}"
                self.channel.send(end)
                raise
            if kind == TOOL:
                end["output"] = message_text(answer)
            elif kind == ENV_RESPONSE:
                end["output"] = messages_text(answer)
            self.channel.send(end)
            return answer

        return step

    def _unreached_reported(self, method: Step) -> Step:
        """A ToolEnv answers a tool call whose arguments do not parse (a real model's cut-off
        or malformed JSON) itself, telling the model why, without calling ``call_tool``: each
        such call is reported as a tool step all the same, its error what the model was told,
        so the trace and the trajectory hold every tool call the model made."""

        @functools.wraps(method)
        async def env_response(*args: object, **kwargs: object) -> object:
            rollout = CURRENT.get()
            if rollout is None:
                return await method(*args, **kwargs)
            reached: set[str] = set()
            token = REACHED.set(reached)
            try:
                answer = await method(*args, **kwargs)
            finally:
                REACHED.reset(token)
            messages = args[0] if args else kwargs.get("messages")
            last = messages[-1] if isinstance(messages, list) and messages else None
            told = {
                str(field_of(m, "tool_call_id")): message_text(m)
                for m in (answer if isinstance(answer, list) else [])
            }
            for call in field_of(last, "tool_calls") or []:
                call_id = str(field_of(call, "id"))
                if call_id in reached:
                    continue
                number = next(self.steps)
                name = field_of(call, "name") or field_of(field_of(call, "function"), "name")
                arguments = field_of(call, "arguments") or field_of(
                    field_of(call, "function"), "arguments"
                )
                begin: Event = {"op": "begin", "id": rollout, "step": number, "kind": TOOL}
                begin.update(name=str(name), call_id=call_id)
                self.channel.send(begin)
                error = told.get(call_id) or "the tool was not called"
                end: Event = {"op": "end", "id": rollout, "step": number}
                end.update(arguments=arguments, error=error)
                self.channel.send(end)
            return answer

        return env_response

    # --- model calls through the server ---------------------------------------------------------

    def client(self, rollout: int) -> Any:
        """verifiers' chat client over an AsyncOpenAI whose every request is the server's."""
        import openai

        transport = make_transport(self.http, functools.partial(self.model_call, rollout))
        sdk = openai.AsyncOpenAI(
            base_url=BASE_URL,
            api_key="rollgym-no-key",
            max_retries=0,
            http_client=self.http.AsyncClient(transport=transport),
        )
        return self.vf.OpenAIChatCompletionsClient(sdk)

    async def model_call(self, rollout: int, body: object) -> Request:
        call = next(self.calls)
        future: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        self.pending[(rollout, call)] = future
        try:
            self.channel.send({"op": "model", "id": rollout, "call": call, "body": body})
            return await future
        finally:
            self.pending.pop((rollout, call), None)

    def answered(self, request: Request) -> None:
        future = self.pending.get((request["id"], request["call"]))
        if future is not None and not future.done():
            future.set_result(request)

    # --- rollouts ---------------------------------------------------------------------------------

    def start(self, request: Request) -> None:
        rollout = int(request["id"])
        task = asyncio.get_running_loop().create_task(self.play(rollout, request))
        self.playing[rollout] = task
        task.add_done_callback(lambda _: self.playing.pop(rollout, None))

    def cancel(self, request: Request) -> None:
        task = self.playing.get(int(request["id"]))
        if task is not None:
            task.cancel()

    async def play(self, rollout: int, request: Request) -> None:
        token = CURRENT.set(rollout)
        try:
            result = await self.rollout(rollout, request)
        except asyncio.CancelledError:
            return
        except Failure as failure:
            self.channel.send({"op": "failed", "id": rollout, **failure.event()})
            return
        except Exception as exc:  # rollgym's own bug here: still one line, never a traceback
            event = {"status": 500, "step": "rollout", "message": chain_text(exc)}
            self.channel.send({"op": "failed", "id": rollout, **event})
            return
        finally:
            CURRENT.reset(token)
        self.channel.send({"op": "done", "id": rollout, "result": result})

    async def rollout(self, rollout: int, request: Request) -> Scored:
        rollout_input = request.get("input") or self.example(int(request["example"]))
        client = self.client(rollout)
        try:
            state = await self.env.rollout(
                rollout_input, client, request["model"], self.sampling(request.get("sampling"))
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the environment's own code raised out of its rollout
            raise Failure(502, "rollout", f"{type(exc).__name__}: {one_line(exc)}") from None
        finally:
            await client.close()
        self.refuse_failed(state)
        return await self.score(rollout, state)

    def sampling(self, given: Mapping[str, object] | None) -> dict[str, object]:
        """The environment's own sampling arguments under the server's (as verifiers'
        ``generate`` merges them); one completion a call (``n``: rollgym counts rollouts)."""
        merged = dict(self.env.sampling_args or {})
        extra = dict(merged.pop("extra_body", None) or {})
        merged.pop("n", None)
        for key, value in (given or {}).items():
            if key == "extra_body" and isinstance(value, Mapping):
                extra.update(value)
            else:
                merged[key] = value
        if extra:
            merged["extra_body"] = extra
        return merged

    def refuse_failed(self, state: Mapping[str, object]) -> None:
        """A rollout whose model call failed, or whose infrastructure did, is a failure (its
        status the model server's), not a reward of 0."""
        error = state.get("error")
        if not isinstance(error, BaseException):
            return
        status = model_status(error)
        if status is not None:
            raise Failure(status, "model call", chain_text(error))
        if isinstance(error, self.vf.InfraError):
            raise Failure(502, "rollout", chain_text(error))

    async def score(self, rollout: int, state: Mapping[str, object]) -> Scored:
        number = next(self.steps)
        self.channel.send({"op": "begin", "id": rollout, "step": number, "kind": SCORE})
        end: Event = {"op": "end", "id": rollout, "step": number}
        try:
            result = await self._scored(state)
        except Failure as failure:
            end["error"] = failure.message
            raise
        else:
            end["reward"] = result["reward"]
            end["metrics"] = dict(result["details"]["metrics"])
        finally:
            self.channel.send(end)
        return result

    async def _scored(self, state: Mapping[str, object]) -> Scored:
        rubric = self.env.rubric
        try:
            if self.env.score_rollouts:
                await rubric.score_rollout(state)
            else:
                await rubric.dummy_score_rollout(state)
            await rubric.cleanup(state)
        except Exception as exc:
            raise Failure(502, "score", f"{type(exc).__name__}: {one_line(exc)}") from None
        reward = state.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise Failure(502, "score", f"the rubric scored {reward!r}, not a number")
        scored = state.get("metrics")
        metrics = {
            str(k): float(v)
            for k, v in (scored.items() if isinstance(scored, Mapping) else ())
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        trajectory = state.get("trajectory")
        details: Details = {
            "metrics": metrics,
            "stop_condition": state.get("stop_condition"),
            "turns": len(trajectory) if isinstance(trajectory, list) else 0,
            "is_truncated": bool(state.get("is_truncated")),
        }
        error = state.get("error")
        if isinstance(error, BaseException):  # an error verifiers ends a rollout on, and scores
            details["error"] = chain_text(error)
        completion = state.get("completion")
        if not isinstance(completion, list):
            completion = []
        return {
            "reward": float(reward),
            "answer": final_answer(completion),
            "tool_calls": tool_calls(completion),
            "details": details,
        }

    def example(self, index: int) -> dict[str, object]:
        examples = self.dataset()
        if not 0 <= index < len(examples):
            raise Failure(
                400, "task", f"example {index} is not in the dataset ({len(examples)} examples)"
            )
        return dict(examples[index])

    def dataset(self) -> Any:
        if self.examples is None:
            env = self.env
            try:
                if env.eval_dataset is not None or env.eval_dataset_source is not None:
                    self.examples = env.get_eval_dataset()
                else:
                    self.examples = env.get_dataset()
            except Exception as exc:
                raise Failure(502, "dataset", f"{type(exc).__name__}: {one_line(exc)}") from None
        return self.examples


class Failure(Exception):
    """A rollout that failed at ``step``, with the status that says whose fault it was."""

    def __init__(self, status: int, step: str, message: str) -> None:
        super().__init__(message)
        self.status, self.step, self.message = status, step, message

    def event(self) -> Event:
        return {"status": self.status, "step": self.step, "message": self.message}


#: The rollout the current task plays (its id), for the wrapped steps.
CURRENT: contextvars.ContextVar[int | None] = contextvars.ContextVar("vf_rollout", default=None)


def http_library() -> Any:
    """httpx2 (openai 3.x) or httpx (openai 1.x, 2.x): the SDK accepts only its own client."""
    import openai

    for cls in openai.DefaultAsyncHttpxClient.__mro__:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.split(".")[0])
    return importlib.import_module("httpx")


def make_transport(http: Any, call: Callable[[object], Awaitable[Request]]) -> object:
    """A transport that answers each chat completion request with the server's answer."""

    class ServerTransport(http.AsyncBaseTransport):  # type: ignore[misc]
        async def handle_async_request(self, request: Any) -> object:
            body = json.loads(await request.aread() or b"{}")
            answer = await call(body)
            return http.Response(
                int(answer.get("status", 502)),
                json=answer.get("body") or {},
                request=request,
            )

    return ServerTransport()


def model_status(error: BaseException) -> int | None:
    """The status of a failed model call, if ``error`` is one (verifiers wraps the OpenAI
    SDK's error in its ModelError); a refusal for good (4xx) is not retried (424)."""
    import openai

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, openai.APITimeoutError):
            return 504
        if isinstance(seen, openai.APIStatusError):
            code = seen.status_code
            return (
                424
                if 400 <= code < 500 and code not in (408, 429)
                else (504 if code == 504 else 502)
            )
        if isinstance(seen, openai.APIConnectionError):
            return 502
        seen = seen.__cause__ or seen.__context__
    return None


def field_of(item: object, name: str) -> Any:
    """``item[name]`` of a dict, else its attribute (verifiers' messages are either)."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def message_text(message: object) -> str:
    content = (
        message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    )
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            for part in content
        ]
        return "\n".join(t for t in texts if isinstance(t, str))
    return "" if content is None else str(content)


def messages_text(messages: object) -> str:
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        return "\n".join(message_text(m) for m in messages)
    return message_text(messages)


def role_of(message: object) -> object:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def final_answer(completion: list[object]) -> str | None:
    for message in reversed(completion):
        if role_of(message) == "assistant":
            return message_text(message)
    return None


def tool_calls(completion: list[object]) -> int:
    count = 0
    for message in completion:
        calls = (
            message.get("tool_calls")
            if isinstance(message, dict)
            else getattr(message, "tool_calls", None)
        )
        if isinstance(calls, list):
            count += len(calls)
    return count


def load(target: str, args: dict[str, object]) -> tuple[Any, Any]:
    """verifiers and the environment ``target`` names (module, or module:object), or a
    ``Failure`` whose message is the one line to show."""
    try:
        import verifiers as vf
    except ImportError:
        raise Failure(
            0,
            "load",
            "the 'verifiers' package is not installed in this Python: pip install 'rollgym[verifiers]' (or make its venv with scripts/test.sh)",
        ) from None
    if not hasattr(vf, "Environment"):
        raise Failure(
            0,
            "load",
            f"verifiers {getattr(vf, '__version__', '?')} has no classic Environment API (vf.Environment, SingleTurnEnv, ToolEnv); install verifiers 0.3",
        )
    module_name, _, name = target.partition(":")
    if not module_name:
        raise Failure(0, "load", f"{target!r} must look like 'module' or 'module:object'")
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise Failure(0, "load", f"no module named {module_name!r}") from None
        raise Failure(
            0, "load", f"cannot import {module_name!r}: ModuleNotFoundError: {one_line(exc)}"
        ) from None
    except Exception as exc:
        raise Failure(
            0, "load", f"cannot import {module_name!r}: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    found = getattr(module, name or "load_environment", None)
    if found is None:
        what = "exposes no load_environment()" if not name else f"has no {name!r}"
        raise Failure(0, "load", f"module {module_name!r} {what}")
    if isinstance(found, vf.Environment):
        if args:
            raise Failure(
                0,
                "args",
                f"{target!r} is an environment already built; 'verifiers_args' needs a function that builds one",
            )
        env = found
    elif not callable(found):
        raise Failure(
            0, "load", f"{target!r} is a {type(found).__name__}, not a verifiers Environment"
        )
    else:
        try:
            env = found(**args)
        except Exception as exc:  # the user's code: what it raised, in one line
            raise Failure(
                0, "load", f"{target!r} raised while loading: {type(exc).__name__}: {one_line(exc)}"
            ) from None
        if not isinstance(env, vf.Environment):
            raise Failure(
                0,
                "load",
                f"{target!r} returned a {type(env).__name__}, not a verifiers Environment",
            )
    if env.requires_group_rollouts:
        raise Failure(
            0,
            "load",
            f"{target!r} scores with group reward functions, which need every rollout of a group at once: not supported",
        )
    if not env.env_id:
        env.env_id = module_name
    return vf, env


async def serve(worker: Worker) -> None:
    """Read requests until stdin closes (the server is gone), then end every rollout."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        request = json.loads(line)
        op = request.get("op")
        if op == "rollout":
            worker.start(request)
        elif op == "answer":
            worker.answered(request)
        elif op == "cancel":
            worker.cancel(request)
    for task in list(worker.playing.values()):
        task.cancel()


def main() -> None:
    # The protocol owns the real stdout; anything the environment prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel = Channel(out)
    target, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        vf, env = load(target, args)
    except Failure as failure:
        channel.send(
            {
                "op": "problem",
                "key": "verifiers_args" if failure.step == "args" else "verifiers_environment",
                "message": failure.message,
            }
        )
        return
    worker = Worker(env, vf, channel)
    channel.send({"op": "ready", "env_id": env.env_id})
    asyncio.run(serve(worker))


if __name__ == "__main__":
    main()
