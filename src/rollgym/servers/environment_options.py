"""The options every environment understands, in a module of their own: the driver validates
a config's environment options without importing the environment stack (FastAPI, aiohttp)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from rollgym.defaults import PASS_THRESHOLD
from rollgym.server_options import ServerKind
from rollgym.servers.rollout_options import RolloutOptions


class EnvironmentOptions(RolloutOptions):
    """Options every environment understands."""

    server_refs: ClassVar[dict[str, ServerKind]] = {"model": "model"}

    #: A model server: when set, the environment serves the episode ``/run``.
    model: str | None = None
    #: The ``model`` field of chat requests in episodes; default: the model server's name.
    model_name: str | None = None
    max_turns: int = Field(16, ge=1, description="Model turns per episode.")
    request_timeout_s: float = Field(300.0, gt=0, description="Time limit of one model call.")
    session_ttl_s: float = Field(
        600.0, gt=0, description="Idle seconds before a session is dropped."
    )
    pass_threshold: float = Field(
        PASS_THRESHOLD,
        allow_inf_nan=False,
        description="The reward at or above which a rollout counts as passed, for this "
        "environment's pass_rate; in a job it follows run.pass_threshold unless set here.",
    )
