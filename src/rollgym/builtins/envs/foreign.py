"""What every environment from another package's protocol shares at start-up.

Such an environment (OpenEnv, a NeMo Gym resource server) is named either by the URL of a
server the user runs or by something rollgym starts itself: exactly one of the two. And before
the first rollout it reads one JSON document from the server (OpenEnv's ``/schema``, FastAPI's
``/openapi.json``) to tell it speaks the protocol at all, so a wrong server is one line then,
not a failure per rollout.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import orjson

from rollgym.servers import SetupProblem


def check_one_place(url: str | None, url_key: str, local: str | None, local_key: str) -> None:
    """Exactly one of ``url`` (a server the user runs) and ``local``; the URL an http(s) one.

    Raises ``ValueError`` (the options' validation error, naming the keys)."""
    if (url is None) == (local is None):
        raise ValueError(f"give exactly one of '{url_key}' (a server you run) or '{local_key}'")
    if url is not None and not re.match(r"^https?://[^/]+", url):
        raise ValueError(f"'{url_key}' must be an http(s) URL, got {url!r}")


def fetch_setup_json(base_url: str, path: str, timeout_s: float, where: str, key: str) -> object:
    """``GET base_url + path`` as JSON, or a :class:`SetupProblem` naming ``where``, the
    request and what went wrong (``key``: the option that named the server)."""
    what = f"{where}: GET {path}"
    try:
        with urllib.request.urlopen(  # noqa: S310 (an http(s) URL, checked by the options)
            base_url + path, timeout=timeout_s
        ) as answer:
            return orjson.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise SetupProblem(key, f"{what} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SetupProblem(key, f"{what} failed: {reason}") from None
    except orjson.JSONDecodeError:
        raise SetupProblem(key, f"{what} answered something not JSON") from None
