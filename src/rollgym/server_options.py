"""What every server implementation's options are: the bottom of the server/config layers.

Both :mod:`rollgym.config` (which validates a job's ``servers:`` block against each
implementation's ``Options``) and :mod:`rollgym.servers.base` (which the implementations
subclass) import this, so neither imports the other: imports run downwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from rollgym.urls import http_url_problem, redact_url

ServerKind = Literal["agent", "environment", "model"]


def check_one_place(
    url: str | None, url_key: str, other: object, other_key: str, other_means: str
) -> None:
    """Exactly one of ``url`` (a server the user runs: an http(s) URL) and ``other`` (what
    ``other_means``: a server rollgym launches, another server of the job...). Every option
    pair that says where a server is checks this one way: ``ValueError`` naming both keys."""
    if (url is None) == (other is None):
        raise ValueError(
            f"give exactly one of '{url_key}' (a server you run) or '{other_key}' ({other_means})"
        )
    problem = None if url is None else http_url_problem(url)
    if problem is not None:
        raise ValueError(
            f"'{url_key}' must be an http(s) URL, got {redact_url(url or '')!r}: {problem}"
        )


class ServerOptions(BaseModel):
    """Base of every implementation's ``Options`` model.

    ``server_refs`` maps an option field to the server kind it must name; the config loader
    checks those references across the whole ``servers:`` block.

    ``renamed`` maps an option's old name to its new one: a config written with the old name
    keeps working (the config loader says once that the key was renamed), so a word can be
    given one meaning across all servers without breaking the configs users already have.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    server_refs: ClassVar[dict[str, ServerKind]] = {}
    renamed: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        """The options as written, each old name (``renamed``) read as its new one."""
        if not (cls.renamed and isinstance(data, dict)):
            return data
        old_keys = [old for old in cls.renamed if old in data]
        if not old_keys:
            return data
        data = dict(data)
        for old in old_keys:
            new = cls.renamed[old]
            if new in data:
                raise ValueError(f"give '{new}' only: '{old}' is its old name")
            data[new] = data.pop(old)
        return data

    @classmethod
    def old_names_in(cls, written: dict[str, Any]) -> list[tuple[str, str]]:
        """(old name, new name) of each renamed option ``written`` still uses."""
        return [(old, new) for old, new in cls.renamed.items() if old in written]

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
