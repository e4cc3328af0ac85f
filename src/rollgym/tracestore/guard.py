"""Who may talk to the trace store: DNS-rebinding and cross-site protection for its one port.

The store serves the viewer (read) and the OTLP receiver (write) on one loopback port. Two
browser attacks reach such a port from any web page the user visits:

- **DNS rebinding**: ``evil.example`` re-resolves to 127.0.0.1, so the page's scripts read
  the viewer's API (and post OTLP) as a same-origin site. The browser still sends
  ``Host: evil.example``; a request whose ``Host`` is not a name of this store is refused.
- **Cross-site writes**: a page may POST a "simple" request (``text/plain``, no preflight)
  to ``http://127.0.0.1:4318/v1/traces``. Browsers mark every such request with ``Origin``;
  OTel exporters never send one. OTLP routes refuse any request with an ``Origin`` header
  and any body that is not ``application/x-protobuf``, ``application/json`` or the span
  records of the run's own exporter children (a type no page can send without a preflight).
- **Span records from elsewhere**: records are ``marshal`` data, which Python does not
  promise to read safely when crafted; they are taken from loopback peers only (the run's
  own exporter children), so a host holding the store's token still speaks OTLP.

So the viewer's port serves OTLP only to exporters, never to a browser.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from rollgym.telemetry.pipeline.frames import METRICS_PATH, RECORDS_TYPE, TRACES_PATH
from rollgym.tracestore.access import is_loopback
from rollgym.tracestore.decode import JSON_TYPE, PROTOBUF_TYPE

OTLP_PATHS = frozenset((TRACES_PATH, METRICS_PATH))
_LOOPBACK_NAMES = frozenset(("127.0.0.1", "localhost", "::1"))
_ANY_ADDRESS = frozenset(("0.0.0.0", "::", ""))


def allowed_hosts(bound_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a request may address: loopback names, the bound address, ``extra``."""
    names = set(_LOOPBACK_NAMES) | {name.lower() for name in extra}
    if bound_host not in _ANY_ADDRESS:
        names.add(bound_host.strip("[]").lower())
    return frozenset(names)


def host_name(header: str) -> str:
    """``Host`` without its port: ``127.0.0.1:4318`` -> ``127.0.0.1``, ``[::1]:80`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def guard_middleware(hosts: frozenset[str] | None) -> Middleware:
    """The aiohttp middleware enforcing the rules of the module docstring; ``hosts`` None:
    no ``Host`` check (a store behind a bearer token, which rebinding cannot supply)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        name = host_name(request.headers.get("Host", ""))
        if hosts is not None and name not in hosts:
            return web.json_response(
                {
                    "error": f"Host {name!r} is not a name of this trace store (DNS rebinding "
                    f"protection; allowed: {sorted(hosts)}; add one with --allow-host)"
                },
                status=403,
            )
        if request.path in OTLP_PATHS:
            if "Origin" in request.headers:
                return web.json_response(
                    {"error": "OTLP writes from a web page are refused (the request has Origin)"},
                    status=403,
                )
            if request.method == "POST" and request.content_type.lower() not in (
                PROTOBUF_TYPE,
                JSON_TYPE,
                RECORDS_TYPE,  # the run's own exporter children (a page cannot send it simply)
            ):
                return web.json_response(
                    {
                        "error": f"OTLP body must be {PROTOBUF_TYPE} or {JSON_TYPE}, "
                        f"got {request.content_type!r}"
                    },
                    status=415,
                )
            if request.content_type.lower() == RECORDS_TYPE and not is_loopback(
                request.remote or ""
            ):
                # Span records are marshal data, read only from this machine's own processes
                # (the run's exporter children); a sender elsewhere, token or not, sends OTLP.
                return web.json_response(
                    {
                        "error": f"{RECORDS_TYPE} is taken from this machine only; "
                        f"send {PROTOBUF_TYPE} from elsewhere"
                    },
                    status=403,
                )
        return await handler(request)

    return guard
