"""What every server implementation's options are: the bottom of the server/config layers.

Both :mod:`rollgym.config` (which validates a job's ``servers:`` block against each
implementation's ``Options``) and :mod:`rollgym.servers.base` (which the implementations
subclass) import this, so neither imports the other: imports run downwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

ServerKind = Literal["agent", "environment", "model"]


class ServerOptions(BaseModel):
    """Base of every implementation's ``Options`` model.

    ``server_refs`` maps an option field to the server kind it must name; the config loader
    checks those references across the whole ``servers:`` block.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    server_refs: ClassVar[dict[str, ServerKind]] = {}

    def references(self) -> Iterator[tuple[str, str, ServerKind]]:
        """(key path, server name, kind) of every server these options name: a
        ``server_refs`` field holds one name, or a mapping whose values are names."""
        for field, kind in self.server_refs.items():
            value = getattr(self, field, None)
            if isinstance(value, dict):
                for key, target in value.items():
                    if isinstance(target, str):
                        yield f"{field}.{key}", target, kind
            elif isinstance(value, str):
                yield field, value, kind
