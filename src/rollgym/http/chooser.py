"""Which transport sends a URL: the one place the client's paths are told apart.

The rule, the same for every client of a process:

- a transport given to the client (``HttpClient(transport=...)``, e.g. an in-memory one)
  sends every JSON exchange;
- else, ``ROLLGYM_HTTP_CLIENT=aiohttp`` when the client started: aiohttp sends everything
  (for comparing the two);
- else plain ``http://`` without credentials goes through the lean transport, and the rest
  (``https://``, ``http://user:pass@...`` sent as basic auth, a URL the lean parser does not
  take) through aiohttp, opened on its first such request;
- a streamed answer (SSE) always goes through aiohttp.
"""

from __future__ import annotations

from rollgym.http import lean
from rollgym.http.aiohttp_transport import AiohttpTransport
from rollgym.http.lean_transport import LeanTransport
from rollgym.http.transport import PoolMetrics, Transport


class TransportChooser:
    """The transports of one client, opened at its start, and the choice among them."""

    def __init__(
        self,
        *,
        limit: int,
        keepalive_s: float,
        metrics: PoolMetrics | None,
        given: Transport | None = None,
    ) -> None:
        #: Sends what the lean transport cannot, and every stream; opened on its first request
        #: (or at once, below, when it sends everything).
        self.aiohttp = AiohttpTransport(limit=limit, keepalive_s=keepalive_s, metrics=metrics)
        self.given = given
        #: None when a transport was given or ``ROLLGYM_HTTP_CLIENT=aiohttp`` is set.
        self.lean = (
            LeanTransport(limit=limit, keepalive_s=keepalive_s)
            if given is None and lean.enabled()
            else None
        )
        if self.lean is None and given is None:
            self.aiohttp.open()  # it sends everything: opened with the client, as ever

    def for_url(self, url: str) -> Transport:
        """The transport that sends a JSON exchange to ``url`` (the module doc's rule)."""
        chosen = self.lean
        if chosen is not None and chosen.takes(url):
            return chosen
        given = self.given
        return self.aiohttp if given is None else given

    def for_stream(self) -> AiohttpTransport:
        """The transport that sends a request whose answer is read as it arrives."""
        return self.aiohttp

    @property
    def resent(self) -> int:
        """Requests resent on a fresh connection after the keep-alive race, all transports."""
        total = self.aiohttp.resent + (0 if self.lean is None else self.lean.resent)
        return total + (0 if self.given is None else self.given.resent)

    async def close(self) -> None:
        await self.aiohttp.close()
        for transport in (self.lean, self.given):
            if transport is not None:
                await transport.close()
