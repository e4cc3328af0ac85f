"""A URL cut at its origin (``rollgym.url_origin``): the short way gives exactly what parsing
the whole URL gives, for the lean client's request target and the client span's attributes,
and every URL ``urlsplit`` would change takes the whole parse."""

from __future__ import annotations

import pytest

from rollgym.http import lean
from rollgym.telemetry import names, spans
from rollgym.url_origin import split_origin

URLS = [
    "http://127.0.0.1:8000/run",
    "http://127.0.0.1:8000/r/3-0-a0/v1/chat/completions",
    "http://127.0.0.1:8000/r/custom%2Fid-a2/v1/chat/completions?x=1&y=2",
    "http://127.0.0.1:8000/v1/chat?",  # an empty query: urlsplit drops the "?"
    "http://127.0.0.1:8000/v1/chat?a?b",
    "http://127.0.0.1:8000/v1/chat#frag",
    "http://127.0.0.1:8000/v\t1/chat",
    "http://127.0.0.1:8000/v1/\r\nHost: evil/x",
    "http://127.0.0.1:8000/v1\n/chat",
    "http://127.0.0.1:80\t00/run",
    "http://127.0.0.1:8000?q=/x",
    "http://127.0.0.1:8000#f/x",
    "http://bob:pw@127.0.0.1:8000/run",
    "http://127.0.0.1:8000/path@with-at",
    "http://[::1]:9/run",
    "http://[::1:9/run",
    "http://example.com",
    "http://example.com/",
    "http:///nohost",
    "https://api.example.com/v1/chat/completions",
    "https://user:secret@api.example.com/v1/chat",
    "HTTP://127.0.0.1:8000/run",
    " http://127.0.0.1:8000/run",
    "http://127.0.0.1:bad/run",
    "ftp://127.0.0.1/run",
]


@pytest.mark.parametrize("url", URLS)
def test_the_rest_is_what_urlsplit_keeps_or_the_url_is_parsed_whole(url: str) -> None:
    split = split_origin(url)
    if split is not None:
        origin, rest = split
        assert origin + rest == url
        assert not any(c in rest for c in "\t\r\n#") and not rest.endswith("?")


@pytest.mark.parametrize("url", URLS)
def test_the_lean_target_is_the_whole_parse(url: str) -> None:
    try:
        whole: lean.Target | None | type[ValueError] = lean._parsed_target.__wrapped__(url)
    except ValueError:
        whole = ValueError
    lean.target.cache_clear()
    try:
        short: lean.Target | None | type[ValueError] = lean.target(url)
    except ValueError:
        short = ValueError
    assert short == whole


@pytest.mark.parametrize("url", URLS)
def test_the_client_span_attributes_are_the_whole_parse(url: str) -> None:
    route = "/r/{rollout_id}/v1/chat/completions"
    whole = spans._parsed_client_attributes("POST", "policy", url, route)
    spans._CLIENT_ATTRIBUTES.clear()
    spans._ORIGIN_ATTRIBUTES.clear()
    # twice: once filling the origin's entry, once from it for a URL new to the URL cache
    assert spans._client_attributes("POST", "policy", url, route) == whole
    spans._CLIENT_ATTRIBUTES.clear()
    assert spans._client_attributes("POST", "policy", url, route) == whole


def test_rollout_scoped_urls_share_one_origin_entry() -> None:
    spans._CLIENT_ATTRIBUTES.clear()
    spans._ORIGIN_ATTRIBUTES.clear()
    for i in range(5):
        url = f"http://bob:pw@127.0.0.1:8000/r/{i}-0-a0/v1/chat/completions"
        attributes = spans._client_attributes("POST", "policy", url, "/r/{rollout_id}/v1")
        assert attributes[names.URL_FULL] == (
            f"http://REDACTED:REDACTED@127.0.0.1:8000/r/{i}-0-a0/v1/chat/completions"
        )
        assert attributes[names.SERVER_PORT] == 8000
    assert len(spans._ORIGIN_ATTRIBUTES) == 1
