"""``@tool``: declare an environment tool once, get its validation and its OpenAI schema from it.

The arguments are described by a pydantic model, given explicitly (``@tool(args=ReadKey)``) or
derived from the method's signature (``async def read_key(self, state, key: str)``). The same
model validates the arguments a model sends and produces the JSON schema the model is shown,
so the two can never disagree.

A tool call as a model wrote it can be wrong in four ways, each the model's mistake rather than
a fault of anyone serving it (:data:`MODEL_ERRORS`): arguments that are not JSON, JSON that is
not an object (vLLM's forced tool calls were seen to answer ``true`` and ``48116.5``), an object
that does not fit the schema, a tool that does not exist. :func:`model_arguments` and
:class:`ToolMistake` name them; the environment answers them to the model as a
:class:`ToolAnswer` whose ``error`` says which.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

_MARK = "__rollgym_tool__"

#: The arguments text is not JSON (a cut or garbled generation).
INVALID_JSON: Final = "invalid_json"
#: The arguments are JSON but not an object (``true``, ``48116.5``, ``[...]``).
NOT_AN_OBJECT: Final = "not_an_object"
#: An object that does not fit the tool's schema (a missing, extra or mistyped field).
INVALID_ARGUMENTS: Final = "invalid_arguments"
#: The model named a tool the environment does not have.
UNKNOWN_TOOL: Final = "unknown_tool"
#: Every kind of model mistake in a tool call (``ToolAnswer.error``, the tool span's
#: ``gym.env.tool.model_error``, a trajectory tool turn's ``error``).
MODEL_ERRORS: Final = frozenset((INVALID_JSON, NOT_AN_OBJECT, INVALID_ARGUMENTS, UNKNOWN_TOOL))
#: Most characters of a model-written tool name repeated in a message or a span.
_NAME_SHOWN = 64
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What one tool call the model made came to: ``output``, the text the model reads next,
    and ``error``, which of :data:`MODEL_ERRORS` it was when the call was the model's mistake
    (``output`` then says what was wrong, ``error: ...``), None when the tool ran."""

    output: str
    error: str | None = None


class ToolMistake(Exception):
    """A tool call the model got wrong; ``kind`` is one of :data:`MODEL_ERRORS` and the
    message is what the model is told."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def answer(self) -> ToolAnswer:
        return ToolAnswer(f"error: {self}", self.kind)


def shown_name(name: str) -> str:
    """A model-written tool name, quoted and cut, for a message or a span: a model may write
    anything there, and a log line or attribute must stay small."""
    if len(name) <= _NAME_SHOWN:
        return repr(name)
    return repr(name[:_NAME_SHOWN]) + f"... ({len(name)} characters)"


def model_arguments(name: str, written: object) -> dict[str, Any]:
    """The arguments of a tool call as the model wrote them, as an object.

    ``written`` is the call's ``function.arguments``: the JSON text of the OpenAI API (an
    engine that hands them already parsed is taken as it is); absent or empty means no
    arguments, as for a tool without parameters. Raises :class:`ToolMistake` when the text is
    not JSON or the value is not an object.
    """
    value: object = written
    if written is None or written == "":
        return {}
    if isinstance(written, str):
        try:
            value = orjson.loads(written)
        except orjson.JSONDecodeError as exc:
            raise ToolMistake(
                INVALID_JSON, f"the arguments of tool {shown_name(name)} are not valid JSON: {exc}"
            ) from None
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "null" if value is None else None
        kind = kind or _JSON_TYPES.get(type(value), type(value).__name__)
        raise ToolMistake(
            NOT_AN_OBJECT,
            f"the arguments of tool {shown_name(name)} must be a JSON object, got {kind}",
        )
    return value


class ToolArgumentsError(ValueError):
    """The arguments sent for a tool do not fit its schema; ``field`` names the first bad one."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One declared tool: its public name, its description and its arguments model."""

    name: str
    description: str
    args_model: type[BaseModel]
    #: True when the method takes the model instance itself rather than keyword arguments.
    takes_model: bool
    function: Callable[..., Awaitable[object]]

    def openai_schema(self) -> dict[str, object]:
        """The tool as an OpenAI chat ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.args_model.model_json_schema(),
            },
        }

    def parse(self, arguments: object) -> BaseModel:
        """Validate ``arguments``; raise :class:`ToolArgumentsError` naming the field."""
        try:
            return self.args_model.model_validate(arguments)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(["arguments", *(str(part) for part in first["loc"])])
            raise ToolArgumentsError(
                f"tool {self.name!r}: {field}: {first['msg']}", field
            ) from None

    async def invoke(self, owner: object, state: object, args: BaseModel) -> str:
        """Run the tool method and return its output as text."""
        if self.takes_model:
            result = await self.function(owner, state, args)
        else:
            result = await self.function(
                owner, state, **{key: getattr(args, key) for key in type(args).model_fields}
            )
        if isinstance(result, str):
            return result
        return orjson.dumps(result).decode()


def tool(
    function: Callable[..., Awaitable[object]] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[BaseModel] | None = None,
) -> object:
    """Mark an ``async def method(self, state, ...)`` of an Environment as a tool.

    Usable bare (``@tool``) or with options (``@tool(description=..., args=Model)``). The
    description defaults to the docstring's first paragraph.
    """

    def mark(fn: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn.__name__!r} must be an 'async def' method")
        model = args if args is not None else _model_from_signature(fn)
        doc = inspect.getdoc(fn) or ""
        spec = ToolSpec(
            name=name or fn.__name__,
            description=description or doc.split("\n\n")[0].replace("\n", " "),
            args_model=model,
            takes_model=args is not None,
            function=fn,
        )
        setattr(fn, _MARK, spec)
        return fn

    return mark(function) if function is not None else mark


def tools_of(cls: type) -> dict[str, ToolSpec]:
    """Every tool declared on ``cls`` and its bases, by public name."""
    found: dict[str, ToolSpec] = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            spec = getattr(value, _MARK, None)
            if isinstance(spec, ToolSpec):
                found[spec.name] = spec
    return found


def _model_from_signature(fn: Callable[..., object]) -> type[BaseModel]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[2:]  # skip self, state
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(
                f"tool {fn.__name__!r}: parameter {param.name!r} must be a plain named parameter"
            )
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    config = ConfigDict(extra="forbid")
    return create_model(f"{fn.__name__}_arguments", __config__=config, **fields)
