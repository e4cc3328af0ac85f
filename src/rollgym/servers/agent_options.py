"""The options every agent understands, in a module of their own: the driver validates a
config's agent options without importing the agent stack (FastAPI, aiohttp)."""

from __future__ import annotations

from typing import ClassVar

from rollgym.server_options import ServerKind
from rollgym.servers.rollout_options import RolloutOptions


class AgentOptions(RolloutOptions):
    """Options every agent understands; ``model``/``environment`` name servers of the run;
    ``sampling``, ``trajectories``, ``capture_tokens`` come from :class:`RolloutOptions`."""

    server_refs: ClassVar[dict[str, ServerKind]] = {"model": "model", "environment": "environment"}

    model: str | None = None
    environment: str | None = None
    #: The ``model`` field of chat requests; default: the model server's name.
    model_name: str | None = None
    #: Time limit of one model or environment call, in seconds.
    request_timeout_s: float = 300.0
