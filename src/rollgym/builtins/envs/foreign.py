"""What every environment from another package's protocol shares (OpenEnv, NeMo Gym, ORS).

Such an environment is named either by the URL of a server the user runs or by something
rollgym starts itself: exactly one of the two (:class:`ForeignOptions`). Before the first
rollout it reads one JSON document from the server (OpenEnv's ``/schema``, FastAPI's
``/openapi.json``, ORS's ``/list_environments``) to tell it speaks the protocol at all, so a
wrong server is one line then, not a failure per rollout; a server rollgym started for it is
stopped when that check fails.

Once started, each rollgym session of such an environment holds one session on the foreign
server (a WebSocket, a cookie, a session id): :class:`ForeignSessionsEnvironment` is what keeps
those owned, from the moment their creation begins until they are closed, however the episode
ends, and what turns the model's tool calls into steps there.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, Literal, Protocol, TypeVar

import aiohttp
import orjson
from pydantic import Field, model_validator

from rollgym.builtins.envs.foreign_wire import ForeignError
from rollgym.builtins.envs.nemo_gym_host import StartFailed
from rollgym.servers import (
    UNKNOWN_TOOL,
    Environment,
    EnvironmentOptions,
    HTTPError,
    RolloutContext,
    ServerContext,
    SessionState,
    SetupProblem,
    ToolAnswer,
    ToolMistake,
    check_one_place,
    model_arguments,
)

#: How an episode's rewards make its reward: the last one, or their sum.
RewardOf = Literal["last", "sum"]
#: The ``reward`` option of an environment whose steps carry the rewards (OpenEnv, ORS).
EpisodeReward = Annotated[
    RewardOf,
    Field(description="The episode's reward: the last reward its steps carried, or their sum."),
]
#: The ``system_prompt`` option of an environment that writes the episode's prompt (each
#: environment gives its own default).
SystemPrompt = Annotated[str, Field(description="The system message of each episode.")]
#: What a tool call after the episode's end is told.
EPISODE_OVER = "the episode is over: reply with your final answer"
#: What the output of the step that ends the episode says after it.
OVER_NOTE = "\n(the episode is over)"
#: How long closing a foreign session waits for its creation, if that is under way.
SEEDING_WAIT_S = 10.0


def venv_python(name: str, fallback: str) -> str:
    """The Python of the venv scripts/test.sh makes for ``name`` (``~/.cache/rollgym-<name>``)
    where it was made, else ``fallback``: for a package whose pins clash with rollgym's."""
    python = Path.home() / ".cache" / f"rollgym-{name}" / "venv" / "bin" / "python"
    return str(python) if python.exists() else fallback


def episode_reward(rewards: list[float], how: RewardOf) -> float:
    """The episode's reward from the rewards its steps carried (none: 0.0)."""
    if how == "sum":
        return float(sum(rewards))
    return rewards[-1] if rewards else 0.0


def function_tool(name: str, description: str, parameters: object) -> dict[str, Any]:
    """A foreign tool as the model is offered it: an OpenAI chat ``tools`` entry."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def refused_over_http(answer: ToolAnswer) -> str:
    """A tool call made over HTTP (``POST /tools/{name}``) has a caller, not a model, to tell
    of a mistake: an unknown tool is its 404, arguments the tool refuses its 400; else the
    tool's output."""
    if answer.error == UNKNOWN_TOOL:
        raise HTTPError(404, answer.output.removeprefix("error: "), field="tool")
    if answer.error is not None:
        raise HTTPError(400, answer.output.removeprefix("error: "), field="arguments")
    return answer.output


def server_url(server: str) -> Any:
    """The option naming ``server`` (what it is, as the description says it) by the base URL
    of one the user runs: the first of :attr:`ForeignOptions.place_options`."""
    return Field(None, description=f"Base URL of {server} you run (http://host:port).")


class ForeignOptions(EnvironmentOptions):
    """What the options of an environment from another package's protocol share: exactly one
    place for its server, an http(s) URL the user runs or something rollgym starts."""

    #: The option naming a server the user runs, and the one naming what rollgym starts.
    place_options: ClassVar[tuple[str, str]]

    answer_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Time for one exchange with the server (a session's start, a step or tool "
        "call, a verification) to answer.",
    )

    @model_validator(mode="after")
    def _one_place(self) -> ForeignOptions:
        url_key, local_key = self.place_options
        local = getattr(self, local_key)
        check_one_place(getattr(self, url_key), url_key, local, local_key, "rollgym starts it")
        return self


class ForeignSession(Protocol):
    """One session on the foreign server, as the environment holds it."""

    closed: bool


class LocalServer(Protocol):
    """A foreign server rollgym started for the environment: where it listens, how it stops."""

    url: str

    def stop(self) -> None: ...


Wire = TypeVar("Wire", bound=ForeignSession)


class Creation:
    """The creation of one foreign session, as :meth:`ForeignSessionsEnvironment.seeding`
    follows it: ended (:attr:`ended` set) once its request has its answer or failed.

    The request goes through :meth:`of`, which waits for its answer even when the rollout
    that asked is cancelled meanwhile (its caller gave up): the foreign server goes on creating
    the session whether anyone waits or not, and a close sent before the creation has ended
    finds nothing to close there (openreward's ``/delete`` of a session still in ``/create``
    does nothing, and the instance ``/create`` then makes is left open). So the close waits
    for the answer, which also carries what it needs (the session's id, its cookie)."""

    __slots__ = ("_pending", "ended")

    def __init__(self) -> None:
        #: Set once the creation has ended, however: what a close waits for.
        self.ended = asyncio.Event()
        self._pending: asyncio.Future[None] | None = None

    async def of(self, request: Awaitable[None]) -> None:
        """Await ``request`` (the creation's exchange) to its end, even past a cancellation of
        the caller (which is raised here at once, the request going on)."""
        pending = asyncio.ensure_future(request)
        pending.add_done_callback(self._done)
        self._pending = pending
        await asyncio.shield(pending)

    def _done(self, pending: asyncio.Future[None]) -> None:
        if not pending.cancelled():
            pending.exception()  # retrieved: a caller that gave up is not told of it
        self.ended.set()

    def settle(self) -> None:
        """The seeding block has ended: so has the creation, unless its request is still
        going (its answer then ends it)."""
        if self._pending is None or self._pending.done():
            self.ended.set()


class ForeignSessionsEnvironment(Environment, Generic[Wire]):
    """An environment each of whose sessions holds one session on a foreign server.

    Start-up: this class finds the server (the URL option's, or one :meth:`start_local`
    starts from the other option) and has :meth:`check_protocol` read it once; a server
    started here is stopped if that fails, and at shutdown.

    Sessions: a subclass's :meth:`seed` makes its foreign session (a ``Wire``) inside
    :meth:`seeding` and answers :meth:`seeded` with it and the session's tools (OpenAI
    function schemas); it writes
    :meth:`close_wire` (how to end one) and :meth:`foreign_step` (one tool call there, the
    arguments already checked). This class keeps each foreign session owned from the moment
    its creation begins: it is closed, in a task of its own, when its episode ``/run`` ends
    however it ends, when a tool call fails, when its rollgym session expires unused, after
    verification (:meth:`verifying`), and at shutdown, a session still being seeded then
    included: its close waits for the seeding, so it never overtakes the creation it undoes.
    """

    #: A subclass's Options are ForeignOptions with its ``place_options``.
    options: ForeignOptions
    #: How the foreign server is called in messages: a server by URL, one started here.
    url_what: ClassVar[str]
    local_what: ClassVar[str]
    #: The key ``aggregate_metrics`` counts closed and refused closes under (None: not counted).
    closes_metric: ClassVar[str | None] = None
    #: The option that named the server (what a SetupProblem blames).
    key: str
    #: Where the foreign server is, for messages ("OpenEnv server http://...").
    where: str
    #: The server's base URL (a started one's included).
    base_url: str

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        #: The foreign session of each live rollgym session, by session id.
        self._wires: dict[str, Wire] = {}
        #: Every foreign session not closed yet, from the moment its creation began: what a
        #: shutdown closes. Each with the event set once its creation has ended.
        self._unclosed: dict[Wire, asyncio.Event] = {}
        #: The task closing each foreign session being closed (one per session).
        self._closing: dict[Wire, asyncio.Task[None]] = {}
        self._http: aiohttp.ClientSession | None = None
        #: Sessions closed, and closes the server refused (``aggregate_metrics``).
        self.closes = {"closed": 0, "refused": 0}
        self._local: LocalServer | None = None
        self._find_server()

    # --- what a subclass writes -----------------------------------------------------------------

    def start_local(self, target: str) -> LocalServer:
        """Start the server the local option names (``target``), ready to answer; raise
        :class:`StartFailed` or :class:`SetupProblem` when it does not come up."""
        raise NotImplementedError

    def check_protocol(self) -> None:
        """Read the server once (``self.base_url``), keeping what the sessions need; raise a
        :class:`SetupProblem` naming ``self.key`` when it does not speak the protocol."""
        raise NotImplementedError

    async def close_wire(self, wire: Wire, session_id: str) -> bool | None:
        """End one foreign session (``session_id``: rollgym's, "" before it has one); whether
        the server took it, where the protocol says (counted under :attr:`closes_metric`)."""
        raise NotImplementedError

    async def foreign_step(
        self, state: SessionState, name: str, args: dict[str, Any], call_id: str | None
    ) -> ToolAnswer:
        """One tool call on the session's foreign session (its rollgym id:
        ``state.data["session_id"]``): ``name`` is one of its tools, ``args`` an object. A
        :class:`ForeignError` fails the rollout and ends the session."""
        raise NotImplementedError

    # --- start-up and shutdown ------------------------------------------------------------------

    def _find_server(self) -> None:
        options = self.options
        url_key, local_key = options.place_options
        target: str | None = getattr(options, local_key)
        if target is not None:
            self.key = local_key
            self.where = f"{self.local_what} {target!r}"
            try:
                self._local = self.start_local(target)
            except StartFailed as exc:
                raise SetupProblem(self.key, f"{self.where}: {exc}") from None
            self.base_url = self._local.url
        else:
            self.key = url_key
            self.base_url = str(getattr(options, url_key)).rstrip("/")
            self.where = f"{self.url_what} {self.base_url}"
        try:
            self.check_protocol()
        except BaseException:
            self.stop_local_server()
            raise

    def setup_json(self, path: str, timeout_s: float) -> object:
        """``GET path`` on the server as JSON (what :meth:`check_protocol` reads), or a
        :class:`SetupProblem` naming the option that named the server, the request and what
        went wrong."""
        what = f"{self.where}: GET {path}"
        try:
            with urllib.request.urlopen(  # noqa: S310 (an http(s) URL, checked by the options)
                self.base_url + path, timeout=timeout_s
            ) as answer:
                return orjson.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise SetupProblem(self.key, f"{what} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SetupProblem(self.key, f"{what} failed: {reason}") from None
        except orjson.JSONDecodeError:
            raise SetupProblem(self.key, f"{what} answered something not JSON") from None

    def stop_local_server(self) -> None:
        """Stop the server rollgym started for this environment, if any (blocking)."""
        if self._local is not None:
            self._local.stop()

    async def on_startup(self) -> None:
        await super().on_startup()
        # Each session holds a connection of its own for its whole episode: no pool limit.
        # A session's cookie, if it has one, is its own (carried by the session), never shared.
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
        )

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
            session_of = {wire: session_id for session_id, wire in self._wires.items()}
            self._wires.clear()
            for wire in list(self._unclosed):
                self.closing(wire, session_of.get(wire, ""))
            if self._closing:
                # shielded: a shutdown cut short (an orphaned server's) lets them run on
                closes = [asyncio.shield(task) for task in self._closing.values()]
                await asyncio.gather(*closes, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
        finally:
            await asyncio.to_thread(self.stop_local_server)

    def aggregate_metrics(self) -> dict[str, object]:
        metrics = super().aggregate_metrics()
        if self.closes_metric is not None:
            metrics[self.closes_metric] = dict(self.closes)
        return metrics

    def http(self) -> aiohttp.ClientSession:
        """The client the foreign sessions use; 503 before start-up."""
        if self._http is None:
            raise HTTPError(503, f"environment {self.context.name!r} is not started")
        return self._http

    # --- sessions -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def seeding(self, wire: Wire) -> AsyncIterator[Creation]:
        """The block that creates ``wire``'s foreign session and reads what its episode starts
        with; it makes the creation's request through what it is given (``await
        creation.of(wire.open(...))``; without one, the block's end counts as the creation's).
        ``wire`` is owned from the block's first line: a shutdown
        meanwhile closes it once its creation has ended, so the close never overtakes the
        creation it undoes; a block that fails or is cancelled closes it the same way, a
        foreign failure told as this environment's (HTTPError)."""
        creation = Creation()
        self._unclosed[wire] = creation.ended
        try:
            yield creation
        except ForeignError as exc:
            creation.settle()
            await asyncio.shield(self.closing(wire, ""))
            raise self.failed(exc) from None
        except BaseException:
            creation.settle()
            await asyncio.shield(self.closing(wire, ""))
            raise
        finally:
            creation.settle()

    def seeded(
        self,
        wire: Wire,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        **episode: object,
    ) -> SessionState:
        """What :meth:`seed` answers: the session's state with ``wire`` and its ``tools``
        (OpenAI function entries) where this class reads them, and the subclass's own
        ``episode`` keys beside them."""
        data: dict[str, Any] = {
            "wire": wire,
            "tools": tools,
            "tool_names": frozenset(str(t["function"]["name"]) for t in tools),
            **episode,
        }
        return SessionState(messages=messages, data=data)

    async def open_session(self, rollout_id: str | None, task: dict[str, Any]) -> dict[str, object]:
        """The rollgym session, its own tools offered."""
        seeded = await super().open_session(rollout_id, task)
        session_id = str(seeded["session_id"])
        session = self.sessions.get(session_id)
        assert session is not None  # created just now
        session.state.data["session_id"] = session_id
        self._wires[session_id] = session.state.data["wire"]
        seeded["tools"] = session.state.data["tools"]
        return seeded

    def on_session_expired(self, state: SessionState) -> None:
        self.release_wire(state.data["session_id"])

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """The shared tool loop; the foreign session closed however the episode ends."""
        try:
            return await super().play_episode(rollout, task)
        finally:
            session_id = getattr(rollout.env, "session_id", None)
            if isinstance(session_id, str):
                self.release_wire(session_id)

    def release_wire(self, session_id: str) -> None:
        """Close the session's foreign session, in a task of its own: a cancelled episode's
        ``finally`` cannot await, and the close must happen all the same."""
        wire = self._wires.pop(session_id, None)
        if wire is not None:
            self.closing(wire, session_id)

    def end_episode(self, state: SessionState) -> None:
        """The episode is over (the foreign server said so, or failed): later tool calls are
        told so, and the foreign session is closed now, not when the rollgym session expires
        (an agent whose rollout fails never verifies it)."""
        state.data["over"] = True
        self.release_wire(state.data["session_id"])

    def closing(self, wire: Wire, session_id: str) -> asyncio.Task[None]:
        """The task closing ``wire`` (started now, or the one already under way): one per
        foreign session, awaited by a shutdown however it was started."""
        task = self._closing.get(wire)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._end(wire, session_id))
            self._closing[wire] = task
            task.add_done_callback(lambda _: self._closing.pop(wire, None))
        return task

    async def _end(self, wire: Wire, session_id: str) -> None:
        """Close ``wire`` once its creation (if under way) has ended; owned no more."""
        created = self._unclosed.get(wire)
        try:
            if created is not None and not created.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SEEDING_WAIT_S):
                        await created.wait()
            if not wire.closed:
                taken = await self.close_wire(wire, session_id)
                if taken is not None:
                    self.closes["closed" if taken else "refused"] += 1
        finally:
            self._unclosed.pop(wire, None)

    @contextlib.asynccontextmanager
    async def verifying(self, state: SessionState) -> AsyncIterator[Wire]:
        """The block that verifies the session: its foreign session is the block's (no expiry
        or episode end closes it meanwhile) and closed when the block ends, however it ends; a
        foreign failure told as this environment's (HTTPError)."""
        session_id: str = state.data["session_id"]
        wire: Wire = state.data["wire"]
        self._wires.pop(session_id, None)
        try:
            yield wire
        except ForeignError as exc:
            raise self.failed(exc) from None
        finally:
            await asyncio.shield(self.closing(wire, session_id))

    # --- tools ----------------------------------------------------------------------------------

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        return refused_over_http(await self.call_model_tool(session_id, name, arguments))

    async def answer_tool_call(
        self, state: SessionState, name: str, arguments: object, call_id: str | None
    ) -> ToolAnswer:
        """The model's mistakes (a tool the session does not have, arguments that are not a
        JSON object) told to the model; after the episode's end, that it is over; anything
        else is a step on the foreign session, whose failure fails the rollout."""
        tools: frozenset[str] = state.data["tool_names"]
        try:
            if name not in tools:
                raise ToolMistake(
                    UNKNOWN_TOOL, f"unknown tool {name[:64]!r}; tools: {sorted(tools)}"
                )
            args = model_arguments(name, arguments)
        except ToolMistake as mistake:
            self.aggregates.record_mistake()
            return mistake.answer()
        if state.data.get("over"):
            return ToolAnswer(EPISODE_OVER)
        try:
            return await self.foreign_step(state, name, args, call_id)
        except ForeignError as exc:
            self.aggregates.record_tool(name, ok=False)
            self.end_episode(state)
            raise self.failed(exc) from None

    def failed(self, exc: ForeignError) -> HTTPError:
        """The foreign server's failure as this environment's HTTP error, naming both."""
        return HTTPError(exc.status, f"environment {self.context.name!r} ({self.where}): {exc}")
