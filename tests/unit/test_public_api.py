"""The front door stays small, sorted and honest: every listed name exists and is importable."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rollgym


def test_public_list_is_sorted_and_every_name_exists() -> None:
    names = list(rollgym.__all__)
    assert names == sorted(names, key=lambda n: (n.startswith("_"), n)) or names == sorted(names)
    for name in names:
        assert hasattr(rollgym, name), name


def test_public_list_is_short_and_holds_the_entry_points() -> None:
    assert len(rollgym.__all__) <= 20
    for name in (
        "Collector",
        "RolloutResult",
        "RolloutFailure",
        "run_job",
        "load_config",
        "JobConfig",
    ):
        assert name in rollgym.__all__
    assert isinstance(rollgym.__version__, str)


def test_public_classes_claim_the_package() -> None:
    """Nothing public is a re-export of a third-party object."""
    for name in rollgym.__all__:
        value = getattr(rollgym, name)
        module = getattr(value, "__module__", "rollgym")
        assert module.startswith("rollgym"), (name, module)


def test_errors_share_one_root() -> None:
    for name in ("ConfigError", "InputError", "LaunchError", "DispatchError"):
        assert issubclass(getattr(rollgym, name), rollgym.RollgymError)


def test_every_public_name_is_listed_in_the_lazy_table() -> None:
    from rollgym import _EXPORTS

    assert set(_EXPORTS) | {"__version__"} == set(rollgym.__all__)
    with pytest.raises(AttributeError, match="NoSuchThing"):  # unknown names raise
        rollgym.NoSuchThing  # noqa: B018


def test_the_sandbox_door_is_sorted_and_its_error_shares_the_root() -> None:
    import rollgym.sandbox as sandbox

    assert list(sandbox.__all__) == sorted(sandbox.__all__)
    for name in sandbox.__all__:
        # its own names, or its error, which lives in the one error tree
        module = getattr(sandbox, name).__module__
        assert module.startswith(("rollgym.sandbox", "rollgym.errors")), name
    assert issubclass(sandbox.SandboxUnavailable, rollgym.RollgymError)


# --- rollgym.servers: the front door for server authors ---------------------------------------

#: What a server author needs, and nothing else: the list is part of the public API.
SERVERS_DOOR = {
    "HEADER_REQUEST_ID",
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
    "TransportError",
    "Verdict",
    "check_one_place",
    "content_text",
    "first_message",
    "gate",
    "is_uuid",
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
    "model_arguments",
    "ToolMistake",
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "upstream_uuid",
    "wire_messages",
}

#: Where a built-in may import rollgym names from: the servers door, the package door, the
#: sandbox door (a public package of its own) and the other built-ins.
BUILTIN_DOORS = ("rollgym", "rollgym.servers", "rollgym.sandbox")


def test_the_servers_door_lists_exactly_what_a_server_author_needs() -> None:
    import rollgym.servers as servers

    assert set(servers.__all__) == SERVERS_DOOR
    # sorted as ruff sorts it: constants, then classes, then functions and modules
    order = sorted(servers.__all__, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
    assert list(servers.__all__) == order
    for name in servers.__all__:
        assert getattr(servers, name) is not None, name
    assert issubclass(servers.ServerCallError, rollgym.RollgymError)
    with pytest.raises(AttributeError, match="NoSuchThing"):  # unknown names raise
        servers.NoSuchThing  # noqa: B018


def _rollgym_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every rollgym import in ``path``, function-local ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, module) for line, module in found if module.split(".")[0] == "rollgym"]


def test_builtins_import_only_through_the_doors() -> None:
    """The built-ins are examples a user can copy: no internal module of rollgym in them."""
    root = Path(rollgym.__file__).parent
    strays = [
        f"{path.relative_to(root)}:{line}: {module}"
        for path in sorted((root / "builtins").rglob("*.py"))
        for line, module in _rollgym_imports(path)
        if module not in BUILTIN_DOORS and not module.startswith("rollgym.builtins")
    ]
    assert strays == []
