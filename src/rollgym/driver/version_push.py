"""Telling the model servers which policy version is current (``POST /policy_version``).

The trainer sets ``Collector.policy_version`` from its own loop, often between awaits, so the
setter must not block: it starts a send in the background, and a newer version supersedes a
send still under way (only the latest matters). Each send says when the trainer set the version
(``set_ns``), so a send that arrives after a newer version (or after the floor a dispatch
carried, :mod:`rollgym.policy_versions`) changes nothing: a late push never moves a server
back. The push is not what makes a version hold for the rollouts dispatched after it is set
(their floor does); it tells the model servers for the calls that carry no floor. ``set_policy_version`` awaits the send, for a
trainer that wants every model server to have the version before it goes on. Every replica
of a model server is told (each one stamps its own answers). A model server that has no
such route (an engine reached by ``url:``, not a rollgym model server) is warned about once
and left out: its calls simply carry no version.

With ``weights`` (a checkpoint path the trainer wrote) each replica loads it before it holds
the version (``servers/model.py``: calls in flight finish first, under the old weights and
stamp); the send waits for every replica, and a replica that could not load it raises one
``ServerCallError`` naming it and why (the others that did hold the new weights). Loading
takes longer than a number: such a send may take :data:`WEIGHTS_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from rollgym.errors import ServerCallError, TransportError
from rollgym.http.client import HttpClient
from rollgym.policy_versions import ROUTE, PolicyVersion

log = logging.getLogger(__name__)
_TIMEOUT_S = 10.0
#: How long one replica may take to let its calls in flight finish and load a checkpoint.
WEIGHTS_TIMEOUT_S = 900.0


class VersionPush:
    """Sends the current version to every replica of every model server."""

    __slots__ = ("_targets", "_task")

    def __init__(self, targets: Mapping[str, list[str]]) -> None:
        #: server name -> the base URL of each of its replicas
        self._targets = {name: [u.rstrip("/") for u in urls] for name, urls in targets.items()}
        self._task: asyncio.Task[None] | None = None

    def __bool__(self) -> bool:
        return bool(self._targets)

    def replicas(self) -> list[tuple[str, str]]:
        """``(server name, replica URL)`` of every replica told (the weight probe asks each)."""
        return [(name, url) for name, urls in self._targets.items() for url in urls]

    async def send(
        self,
        client: HttpClient,
        version: PolicyVersion,
        set_ns: int,
        weights: str | None = None,
    ) -> None:
        """POST the version (set at ``set_ns``; loading ``weights`` first) to each replica and
        wait for all of them; raises ``ServerCallError`` naming one that refused."""
        if not self._targets:
            if weights is not None:
                raise ServerCallError(f"no model server to load weights {weights} into")
            return
        sends = [
            self._one(client, name, url, version, set_ns, weights) for name, url in self.replicas()
        ]
        outcomes = await asyncio.gather(*sends, return_exceptions=True)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if len(failed) == 1 or any(not isinstance(f, Exception) for f in failed):
            raise failed[0]
        if failed:
            raise ServerCallError(
                f"{len(failed)} model server replicas failed: " + " | ".join(map(str, failed))
            )
        if weights is not None and not self._targets:
            raise ServerCallError(
                f"no model server could load weights {weights}: none has a {ROUTE} route "
                "(an engine reached by url: needs a rollgym model server in front, impl: openai)"
            )

    async def _one(
        self,
        client: HttpClient,
        name: str,
        url: str,
        version: PolicyVersion,
        set_ns: int,
        weights: str | None,
    ) -> None:
        body: dict[str, object] = {"version": version, "set_ns": set_ns}
        if weights is not None:
            body["weights"] = weights
        response = await client.post_json(
            name,
            url + ROUTE,
            body,
            timeout=_TIMEOUT_S if weights is None else WEIGHTS_TIMEOUT_S,
            route=ROUTE,
            pinned=True,
        )
        if response.status in (404, 405):  # not a rollgym model server (an engine by url:)
            log.warning(
                "model server %r (%s) has no %s route: its calls carry no policy version%s",
                name,
                url,
                ROUTE,
                " and it loads no weights" if weights is not None else "",
            )
            self._drop(name, url)
            return
        if response.status != 200:
            data = response.data
            error = data.get("error") if isinstance(data, dict) else None
            detail = error if isinstance(error, str) else f"HTTP {response.status} {response.text}"
            doing = f"load weights {weights} for" if weights is not None else "take"
            raise ServerCallError(
                f"model server {name!r} ({url}) did not {doing} policy version {version!r}: "
                f"{detail[:500]}",
                status=response.status,
            )

    def _drop(self, name: str, url: str) -> None:
        urls = [u for u in self._targets.get(name, []) if u != url]
        if urls:
            self._targets[name] = urls
        else:
            self._targets.pop(name, None)

    def start(self, client: HttpClient, version: PolicyVersion, set_ns: int) -> None:
        """Send in the background; a send still under way is superseded (cancelled)."""
        if not self._targets:
            return
        if self._task is not None and not self._task.done():
            self._task.cancel()
        sending = self._logged(client, version, set_ns)
        self._task = asyncio.get_running_loop().create_task(sending)

    async def _logged(self, client: HttpClient, version: PolicyVersion, set_ns: int) -> None:
        try:
            await self.send(client, version, set_ns)
        except (ServerCallError, TransportError) as exc:
            log.warning("policy version %r not delivered: %s", version, exc)

    async def drain(self) -> None:
        """Wait for a background send (the Collector is closing)."""
        task, self._task = self._task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
