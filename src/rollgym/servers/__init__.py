"""The front door for server authors: write an agent, an environment or a model server here.

Everything a server implementation needs comes from this one package: the base classes
(:class:`Agent`, :class:`Environment`, :class:`ModelServer`) and their options, ``@tool``, the
:class:`RolloutContext` a rollout plays through, the errors a server raises or catches, the
shared episode loop (:func:`play_tool_loop`), the row and request-id helpers, and the
telemetry a model server records itself and the seconds it reports (:mod:`server_timing`). The built-in servers (:mod:`rollgym.builtins`)
import only from here, so each of them is an example a user can copy; a test
(``tests/unit/test_public_api.py``) keeps this list and the built-ins honest.

The launcher (:mod:`rollgym.placement.launcher`) starts servers as local processes through
:mod:`rollgym.servers.server_process`; :func:`rollgym.servers.registry.resolve_impl` turns a config's
``impl`` into the class. Names are imported on first use, so the driver (which only needs the
registry and the launcher) does not pay for FastAPI at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door

if TYPE_CHECKING:
    from rollgym import policy_versions, server_timing
    from rollgym.errors import (
        ConnectError,
        HTTPError,
        RequestTimeout,
        ServerCallError,
        TransportError,
    )
    from rollgym.server_options import ServerKind, ServerOptions, check_one_place
    from rollgym.servers import responses_api
    from rollgym.servers.agent import Agent, task_of
    from rollgym.servers.agent_options import AgentOptions
    from rollgym.servers.base import Server, ServerContext
    from rollgym.servers.chat_content import content_text, wire_messages
    from rollgym.servers.environment import Environment, SessionState, Verdict, unknown_session
    from rollgym.servers.environment_options import EnvironmentOptions
    from rollgym.servers.episode_loop import first_message, play_and_verify, play_tool_loop
    from rollgym.servers.model import ChatRequest, CompletionRequest, ModelServer, pass_headers
    from rollgym.servers.request_ids import is_uuid, upstream_uuid
    from rollgym.servers.rollout_context import RolloutContext
    from rollgym.servers.start_checks import SetupProblem
    from rollgym.servers.tools import (
        INVALID_ARGUMENTS,
        UNKNOWN_TOOL,
        ToolAnswer,
        ToolMistake,
        model_arguments,
        tool,
    )
    from rollgym.telemetry import spans
    from rollgym.telemetry.groups import gate
    from rollgym.telemetry.names import HEADER_REQUEST_ID

#: public name -> the module that defines it (or, for a module, the module itself)
_EXPORTS = {
    "Agent": "rollgym.servers.agent",
    "AgentOptions": "rollgym.servers.agent_options",
    "ChatRequest": "rollgym.servers.model",
    "CompletionRequest": "rollgym.servers.model",
    "pass_headers": "rollgym.servers.model",
    "ConnectError": "rollgym.errors",
    "Environment": "rollgym.servers.environment",
    "EnvironmentOptions": "rollgym.servers.environment_options",
    "HEADER_REQUEST_ID": "rollgym.telemetry.names",
    "HTTPError": "rollgym.errors",
    "ModelServer": "rollgym.servers.model",
    "RequestTimeout": "rollgym.errors",
    "RolloutContext": "rollgym.servers.rollout_context",
    "Server": "rollgym.servers.base",
    "ServerCallError": "rollgym.errors",
    "ServerContext": "rollgym.servers.base",
    "ServerKind": "rollgym.server_options",
    "ServerOptions": "rollgym.server_options",
    "check_one_place": "rollgym.server_options",
    "SetupProblem": "rollgym.servers.start_checks",
    "SessionState": "rollgym.servers.environment",
    "INVALID_ARGUMENTS": "rollgym.servers.tools",
    "ToolAnswer": "rollgym.servers.tools",
    "ToolMistake": "rollgym.servers.tools",
    "UNKNOWN_TOOL": "rollgym.servers.tools",
    "model_arguments": "rollgym.servers.tools",
    "TransportError": "rollgym.errors",
    "Verdict": "rollgym.servers.environment",
    "content_text": "rollgym.servers.chat_content",
    "first_message": "rollgym.servers.episode_loop",
    "gate": "rollgym.telemetry.groups",
    "is_uuid": "rollgym.servers.request_ids",
    "play_and_verify": "rollgym.servers.episode_loop",
    "play_tool_loop": "rollgym.servers.episode_loop",
    "policy_versions": "rollgym.policy_versions",
    "responses_api": "rollgym.servers.responses_api",
    "server_timing": "rollgym.server_timing",
    "spans": "rollgym.telemetry.spans",
    "task_of": "rollgym.servers.agent",
    "tool": "rollgym.servers.tools",
    "unknown_session": "rollgym.servers.environment",
    "upstream_uuid": "rollgym.servers.request_ids",
    "wire_messages": "rollgym.servers.chat_content",
}
#: exported names that are whole modules (``responses_api.parse_request``, ``spans.X``)
_MODULES = frozenset({"policy_versions", "responses_api", "server_timing", "spans"})

__all__ = [
    "HEADER_REQUEST_ID",
    "INVALID_ARGUMENTS",
    "UNKNOWN_TOOL",
    "Agent",
    "AgentOptions",
    "ChatRequest",
    "CompletionRequest",
    "ConnectError",
    "Environment",
    "EnvironmentOptions",
    "HTTPError",
    "ModelServer",
    "RequestTimeout",
    "RolloutContext",
    "Server",
    "ServerCallError",
    "ServerContext",
    "ServerKind",
    "ServerOptions",
    "SessionState",
    "SetupProblem",
    "ToolAnswer",
    "ToolMistake",
    "TransportError",
    "Verdict",
    "check_one_place",
    "content_text",
    "first_message",
    "gate",
    "is_uuid",
    "model_arguments",
    "pass_headers",
    "play_and_verify",
    "play_tool_loop",
    "policy_versions",
    "responses_api",
    "server_timing",
    "spans",
    "task_of",
    "tool",
    "unknown_session",
    "upstream_uuid",
    "wire_messages",
]


__getattr__, __dir__ = lazy_door(globals(), _EXPORTS, _MODULES)
