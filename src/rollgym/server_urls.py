"""ServerUrls: where each launched server answers, replicas included.

A plain ``{server name: base URL}`` map (a server with several replicas is known by its first
replica's URL) plus ``replicas``, the full list for the servers launched with more than one.
It lives on the ground floor because the launcher (placement/) builds it and the driver reads
it: neither has to import the other for the type, and nobody reaches for ``replicas`` with
``getattr`` on a map typed ``dict[str, str]``.
"""

from __future__ import annotations

from collections.abc import Mapping


class ServerUrls(dict[str, str]):
    """``{server name: base URL}``, plus ``replicas``: ``{server: [replica URLs]}`` for the
    servers launched with more than one replica."""

    def __init__(
        self, urls: Mapping[str, str], *, replicas: Mapping[str, list[str]] | None = None
    ) -> None:
        super().__init__(urls)
        #: ``{server: [replica URLs]}`` of the servers with several replicas (others absent).
        self.replicas: dict[str, list[str]] = {
            name: list(each) for name, each in (replicas or {}).items()
        }

    def replicas_of(self, name: str) -> list[str]:
        """Every replica URL of ``name``: its list, or its one URL when it has one replica."""
        return list(self.replicas.get(name, [self[name]]))
