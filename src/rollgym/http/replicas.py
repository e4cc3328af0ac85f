"""Balance requests over a server's replicas: least outstanding requests, dead ones out at once.

A server launched with ``servers.<name>.replicas: N`` has N base URLs. Everyone else knows it
by one URL (its first replica's: ``{name: URL}`` stays what it always was), and the one HTTP
client (:class:`~rollgym.http.client.HttpClient`) turns a request to that URL into a request
to the replica with the fewest requests in flight from this process (ties: the one picked
longest ago, so an idle set is used round-robin).

A replica that refuses a connection leaves rotation at once (:meth:`ReplicaSet.mark_down`);
the requests of that attempt fail as transient and the retry goes elsewhere; a pick tries it
again after :data:`RETRY_DOWN_S` (it may have been restarted on its port meanwhile).

A replica that lets a request time out (stopped, wedged, or only very slow) leaves rotation the
same way, so the retry of that attempt goes elsewhere, and then stays *suspect*: it gets one
request at a time until one is answered. Without that, least-outstanding balancing would send
it the most traffic of all once its stuck requests timed out (it has none outstanding), and
every one of those would wait out the whole time limit again, retries included. In the
driver, the supervisor knows more: it holds a dead replica out (:meth:`ReplicaSet.hold`)
until its restart is healthy (:meth:`ReplicaSet.release`), so no attempt is spent on it.

Affinity: an environment session lives in the memory of the replica that created it, so a
caller that must stay there (the session's tool calls and verify) names that replica
(``replica=``) instead of the server URL, and is never balanced away.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit

from rollgym.errors import ConnectionRefused, RequestTimeout

#: How long a replica that refused stays out before a pick may try it again (it may have
#: been restarted on its port meanwhile).
RETRY_DOWN_S = 2.0


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL (how replicas are told apart)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class ReplicaSet:
    """The replicas of one server and the requests this process has in flight to each."""

    def __init__(self, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError("a replica set needs at least one URL")
        self.urls = [origin(url) for url in urls]
        self.outstanding = dict.fromkeys(self.urls, 0)
        #: Replicas out of rotation -> when they left (monotonic seconds).
        self.down: dict[str, float] = {}
        #: Replicas known dead (the supervisor said so): out until released, never retried.
        self.held: set[str] = set()
        #: Replicas whose last finished request timed out: one request at a time until one
        #: is answered.
        self.suspect: set[str] = set()
        self._order = itertools.count()
        self._last_pick = dict.fromkeys(self.urls, -1)

    def pick(self) -> str:
        """The replica to send the next request to (all down: the one down longest, which
        then fails fast as refused, so the attempt is retried rather than waiting here)."""
        if self.down:
            self._retry_expired()
        live = [url for url in self.urls if url not in self.down and url not in self.held]
        if self.suspect:  # a suspect one with its one request out is not picked again
            live = [url for url in live if not self._probing(url)] or live
        if not live:  # a refused one may be back by now; a held one is known dead
            live = [min(self.down, key=self.down.__getitem__)] if self.down else sorted(self.held)
        best = min(live, key=lambda url: (self.outstanding[url], self._last_pick[url]))
        self._last_pick[best] = next(self._order)
        return best

    def started(self, replica: str) -> None:
        self.outstanding[replica] = self.outstanding.get(replica, 0) + 1

    def finished(self, replica: str) -> None:
        self.outstanding[replica] = max(0, self.outstanding.get(replica, 0) - 1)

    @contextmanager
    def in_flight(self, replica: str) -> Iterator[None]:
        """Count a request (or a whole stream) against ``replica`` while the block runs; a
        refused connection takes the replica out of rotation."""
        self.started(replica)
        try:
            yield
        except ConnectionRefused:
            self.mark_down(replica)
            raise
        except RequestTimeout:
            self.mark_down(replica)
            self.suspect.add(replica)
            raise
        else:
            if self.suspect:
                self.suspect.discard(replica)  # it answered: back to normal balancing
        finally:
            self.finished(replica)

    def _probing(self, replica: str) -> bool:
        """Whether ``replica`` is suspect and already has its one request in flight."""
        return replica in self.suspect and self.outstanding[replica] > 0

    def mark_down(self, replica: str) -> None:
        """Out of rotation now (it refused a connection or failed its health check)."""
        if replica in self.outstanding:
            self.down.setdefault(replica, time.monotonic())

    def mark_up(self, replica: str) -> None:
        """Back in rotation (healthy again)."""
        self.down.pop(origin(replica), None)
        self.suspect.discard(origin(replica))

    def hold(self, replica: str) -> None:
        """Out of rotation until :meth:`release`: it is dead and being restarted."""
        if origin(replica) in self.outstanding:
            self.held.add(origin(replica))

    def release(self, replica: str) -> None:
        """Back in rotation: its restart is healthy."""
        self.held.discard(origin(replica))
        self.mark_up(replica)

    def _retry_expired(self) -> None:
        now = time.monotonic()
        for url, since in list(self.down.items()):
            if now - since > RETRY_DOWN_S:  # let picks try it: a refusal puts it back out
                del self.down[url]


class ReplicaTable:
    """``{server URL: its ReplicaSet}`` for one process; servers with one replica are absent."""

    def __init__(self, replicas: Mapping[str, Sequence[str]] | None = None) -> None:
        self._sets: dict[str, ReplicaSet] = {}
        for urls in (replicas or {}).values():
            self.add(urls)

    def add(self, urls: Sequence[str]) -> None:
        """Balance requests to ``urls[0]`` over all of ``urls`` (nothing to do for one)."""
        if len(urls) > 1:
            self._sets[origin(urls[0])] = ReplicaSet(urls)

    def __bool__(self) -> bool:
        return bool(self._sets)

    def for_url(self, url: str) -> ReplicaSet | None:
        """The replica set a request to ``url`` is balanced over (None: a single server)."""
        return self._sets.get(origin(url)) if self._sets else None

    def containing(self, replica: str) -> ReplicaSet | None:
        """The set ``replica`` is one of (for affinity requests and health reports)."""
        wanted = origin(replica)
        return next((s for s in self._sets.values() if wanted in s.outstanding), None)

    def sets(self) -> Iterable[ReplicaSet]:
        return self._sets.values()


def on_replica(url: str, server_origin: str, replica: str) -> str:
    """``url`` (addressed to ``server_origin``) sent to ``replica`` instead."""
    return replica + url[len(server_origin) :] if url.startswith(server_origin) else url
