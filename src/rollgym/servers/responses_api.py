"""The OpenAI Responses API on top of chat completions: a request model and two translations.

Every model server answers ``/v1/responses`` by translating the request to a chat completion
request (:func:`to_chat_request`), calling the same ``complete`` as chat does, and translating
the ``chat.completion`` back (:func:`to_response`). So a subclass that implements only
``complete`` speaks both APIs, with the same rollout attribution and the same spans.

The request is validated by pydantic models whose error locations are plain field paths
(``input.1.call_id``): input items are dispatched on ``type`` by hand rather than through a
pydantic union, whose locations would carry member names (``list[tagged-union[...]]``), so a
400 names the field the client has to fix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from rollgym.errors import HTTPError
from rollgym.servers.chat_content import content_text

_CHAT_PREFIX = "chatcmpl-"


class ContentPart(BaseModel):
    """A text part of a message: ``input_text`` (user/system turns) or ``output_text``
    (earlier assistant turns sent back as history)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["input_text", "output_text"]
    text: str


class MessageItem(BaseModel):
    """``{role, content}``; ``type: "message"`` may be omitted, as the API allows."""

    model_config = ConfigDict(extra="allow")

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: list[ContentPart]

    @field_validator("content", mode="before")
    @classmethod
    def _string_is_one_part(cls, value: object) -> object:
        # A string is one text part: one field type keeps error paths free of union names.
        return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


class FunctionCallItem(BaseModel):
    """A tool call the model made in an earlier turn (sent back as history)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(BaseModel):
    """The result of a tool call, answered by ``call_id``."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call_output"]
    call_id: str
    output: str


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem
_ITEMS: dict[str, type[InputItem]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}


class FunctionTool(BaseModel):
    """A function tool in the Responses shape (flat, unlike chat's ``{function: {...}}``)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, object] | None = None
    strict: bool | None = None


class ResponsesRequest(BaseModel):
    """A ``POST /v1/responses`` body; fields we do not translate are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, object] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    previous_response_id: str | None = None
    stream: bool | None = None

    @field_validator("previous_response_id")
    @classmethod
    def _stateless(cls, value: str | None) -> None:
        if value is not None:
            raise PydanticCustomError(
                "unsupported",
                "is not supported: the server keeps no state; send the whole conversation in input",
            )
        return None

    @field_validator("input", mode="plain")
    @classmethod
    def _input_items(cls, value: object) -> str | list[InputItem]:
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not value:
            raise PydanticCustomError(
                "input_type", "must be a string or a non-empty list of input items"
            )
        items: list[InputItem] = []
        problems: list[InitErrorDetails] = []
        for index, raw in enumerate(value):
            kind = raw.get("type", "message") if isinstance(raw, dict) else None
            model = _ITEMS.get(kind) if isinstance(kind, str) else None
            if model is None:
                where: tuple[int | str, ...] = (
                    (index, "type") if isinstance(raw, dict) else (index,)
                )
                problems.append(_unknown_item(where, raw))
                continue
            try:
                items.append(model.model_validate(raw))
            except ValidationError as exc:
                problems.extend(_prefixed(index, exc))
        if problems:
            raise ValidationError.from_exception_data("input", problems)
        return items


def _unknown_item(where: tuple[int | str, ...], raw: object) -> InitErrorDetails:
    expected = ", ".join(_ITEMS)
    error = PydanticCustomError(
        "input_item_type", "an input item is an object whose type is one of: {expected}"
    )
    return {"type": error, "loc": where, "input": raw, "ctx": {"expected": expected}}


def _prefixed(index: int, exc: ValidationError) -> list[InitErrorDetails]:
    """The item's errors, located under its index in ``input``."""
    problems: list[InitErrorDetails] = []
    for error in exc.errors():
        problem: InitErrorDetails = {
            "type": PydanticCustomError(error["type"], error["msg"]),
            "loc": (index, *error["loc"]),
            "input": error["input"],
        }
        problems.append(problem)
    return problems


def parse_request(body: object) -> ResponsesRequest:
    """Validate a request body; a 400 naming the first bad field (``body.input.1.call_id``)."""
    try:
        return ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        field = ".".join(["body", *(str(part) for part in first["loc"])])
        message = f"{field}: {first['msg']}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        raise HTTPError(400, message, field=field) from None


# --- Responses -> chat ------------------------------------------------------------------------


def to_chat_request(request: ResponsesRequest) -> dict[str, object]:
    """The chat completion request body that asks the same thing (for ``ChatRequest``)."""
    messages: list[dict[str, object]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
    else:
        for item in request.input:
            _append_chat_message(messages, item)
    chat: dict[str, object] = {"model": request.model, "messages": messages}
    if request.tools:
        chat["tools"] = [_chat_tool(tool) for tool in request.tools]
    if request.tool_choice is not None:
        chat["tool_choice"] = _chat_tool_choice(request.tool_choice)
    if request.max_output_tokens is not None:
        chat["max_tokens"] = request.max_output_tokens
    for name in ("parallel_tool_calls", "temperature", "top_p"):
        value = getattr(request, name)
        if value is not None:
            chat[name] = value
    return chat


def _append_chat_message(messages: list[dict[str, object]], item: InputItem) -> None:
    if isinstance(item, MessageItem):
        # "developer" is the newer name of "system"; not every chat server knows it.
        role = "system" if item.role == "developer" else item.role
        messages.append({"role": role, "content": _chat_content(item.content)})
    elif isinstance(item, FunctionCallItem):
        call = {
            "id": item.call_id,
            "type": "function",
            "function": {"name": item.name, "arguments": item.arguments},
        }
        last = messages[-1] if messages else None
        # Chat puts a turn's text and its (parallel) tool calls in one assistant message.
        if last is not None and last["role"] == "assistant":
            calls = last.setdefault("tool_calls", [])
            if isinstance(calls, list):  # always: only this function sets it
                calls.append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    else:
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})


def _chat_content(parts: list[ContentPart]) -> str | list[dict[str, object]]:
    """One part is a plain string (what a string content was); several stay parts."""
    if len(parts) <= 1:
        return parts[0].text if parts else ""
    return [{"type": "text", "text": part.text} for part in parts]


def _chat_tool(tool: FunctionTool) -> dict[str, object]:
    function = tool.model_dump(exclude_none=True, exclude={"type"})
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: str | dict[str, object]) -> str | dict[str, object]:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


# --- chat -> Responses ------------------------------------------------------------------------


def response_id(request_id: str | None, chat_id: object) -> str:
    """``resp_<request id>``, like chat's ``chatcmpl-<request id>``; else from the chat id."""
    if request_id:
        return f"resp_{request_id}"
    if isinstance(chat_id, str) and chat_id:
        return "resp_" + chat_id.removeprefix(_CHAT_PREFIX)
    return f"resp_{uuid.uuid4().hex}"


def to_response(
    answer: Mapping[str, object], request: ResponsesRequest, request_id: str | None
) -> dict[str, object]:
    """The Responses object for a ``chat.completion`` answer to the translated request."""
    rid = response_id(request_id, answer.get("id"))
    suffix = rid.removeprefix("resp_")
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    choice = first if isinstance(first, dict) else {}
    message = choice.get("message") or {}
    output: list[dict[str, object]] = []
    text = content_text(message.get("content"))
    tool_calls = message.get("tool_calls") or []
    if text or not tool_calls:
        output.append(
            {
                "type": "message",
                "id": f"msg_{suffix}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for call in tool_calls:
        function = call.get("function") or {}
        call_id = str(call.get("id") or f"call_{uuid.uuid4().hex}")
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": function.get("name", ""),
                "arguments": function.get("arguments", "{}"),
                "status": "completed",
            }
        )
    truncated = choice.get("finish_reason") == "length"
    return {
        "id": rid,
        "object": "response",
        "created_at": answer.get("created") or int(time.time()),
        "model": answer.get("model") or request.model,
        "status": "incomplete" if truncated else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": [tool.model_dump(exclude_none=True) for tool in request.tools or []],
        "usage": _usage(answer.get("usage")),
    }


def _usage(usage: object) -> dict[str, object]:
    """Chat ``usage`` in the Responses names (details zero where chat reports none)."""
    usage = usage if isinstance(usage, dict) else {}
    input_tokens = int(usage.get("prompt_tokens") or 0)
    output_tokens = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": int(prompt_details.get("cached_tokens") or 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": int(completion_details.get("reasoning_tokens") or 0)
        },
        "total_tokens": int(usage.get("total_tokens") or input_tokens + output_tokens),
    }
