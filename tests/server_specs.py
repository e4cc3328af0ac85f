"""The quickstart's servers as spec dicts, built once: unit, e2e and browser tests start from
this shape and change only what they test (one builder with overrides, not a copy per file).

Importable from every test folder: pytest puts ``tests/`` on ``sys.path`` for its conftest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Spec = dict[str, Any]


def simulated_model(latency_s: float = 0.0, accuracy: float = 1.0, **extra: Any) -> Spec:
    """The simulated policy model: always right by default, answering after ``latency_s``."""
    return {
        "kind": "model",
        "impl": "simulated",
        "accuracy": accuracy,
        "latency": {"kind": "fixed", "seconds": latency_s},
        **extra,
    }


def agent_spec(impl: str, environment: str, model: str = "policy", **extra: Any) -> Spec:
    """An agent server of ``impl`` that plays ``environment`` with ``model``."""
    return {"kind": "agent", "impl": impl, "model": model, "environment": environment, **extra}


def quickstart_servers(
    *,
    model: Spec | None = None,
    episodes: bool = True,
    **changes: Mapping[str, Any] | None,
) -> dict[str, Spec]:
    """``policy`` (``model``, default :func:`simulated_model`), the ``arith`` and ``keys``
    environments, the single-turn ``solver`` and the tool-loop ``walker``.

    With ``episodes`` the keychain environment plays episode ``/run`` rows itself (it names
    the model). Each keyword in ``changes`` names a server: its mapping is merged into that
    server's spec (a new name adds a server), and None leaves the server out.
    """
    keys: Spec = {"kind": "environment", "impl": "keychain"}
    if episodes:
        keys["model"] = "policy"
    servers: dict[str, Spec] = {
        "policy": model if model is not None else simulated_model(),
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "keys": keys,
        "solver": agent_spec("single_turn", "arith"),
        "walker": agent_spec("tool_loop", "keys", max_turns=12),
    }
    return _changed(servers, changes)


def solver_servers(
    *, model: Spec | None = None, **changes: Mapping[str, Any] | None
) -> dict[str, Spec]:
    """The quickstart's arithmetic alone: ``policy``, ``arith`` and the single-turn
    ``solver``; ``model`` and ``changes`` as for :func:`quickstart_servers`."""
    return quickstart_servers(model=model, keys=None, walker=None, **changes)


def walker_servers(
    *, model: Spec | None = None, episodes: bool = True, **changes: Mapping[str, Any] | None
) -> dict[str, Spec]:
    """The keychain walk alone: ``policy`` (default: right 70% of the time, so some walks
    fail), ``keys`` and the tool-loop ``walker``, both at most 8 turns. ``episodes`` and
    ``changes`` as for :func:`quickstart_servers`."""
    servers = quickstart_servers(
        model=model if model is not None else simulated_model(accuracy=0.7),
        episodes=episodes,
        arith=None,
        solver=None,
        walker={"max_turns": 8},
    )
    if episodes:
        servers["keys"]["max_turns"] = 8
    return _changed(servers, changes)


def proxied_servers(
    engine: str | Spec, served_model: str, **changes: Mapping[str, Any] | None
) -> dict[str, Spec]:
    """The quickstart's arithmetic played through the ``openai`` proxy: ``engine`` (a URL of a
    real engine, or a model spec such as :func:`simulated_model`), ``policy`` (the proxy,
    asking the engine for ``served_model``), ``arith`` and the single-turn ``solver``;
    ``changes`` as for :func:`quickstart_servers` (``solver={"sampling": ...}`` and the like)."""
    proxy: Spec = {
        "kind": "model",
        "impl": "openai",
        "upstream": "engine",
        "model_name": served_model,
    }
    upstream = {"kind": "model", "url": engine} if isinstance(engine, str) else engine
    servers = {"keys": None, "walker": None, "engine": upstream, **changes}
    return quickstart_servers(model=proxy, **servers)


def nemo_row_servers() -> dict[str, Spec]:
    """NeMo Gym's row agent (``nemo``) over the quickstart's ``arith`` and ``keys`` (the
    keychain not playing episodes itself), each under the NeMo Gym agent name rows carry."""
    return quickstart_servers(
        episodes=False,
        solver=None,
        walker=None,
        nemo={
            "kind": "agent",
            "impl": "nemo_gym_row",
            "model": "policy",
            "environments": {"math_simple_agent": "arith", "vault_agent": "keys"},
        },
    )


def _changed(
    servers: dict[str, Spec], changes: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Spec]:
    """``servers`` with each named server's spec updated (None: left out)."""
    for name, change in changes.items():
        if change is None:
            servers.pop(name, None)
        else:
            servers[name] = {**servers.get(name, {}), **change}
    return servers
