"""Pay the OpenAI SDK's one-time costs when a server starts, not in its first rollouts.

``import openai`` and the SDK's first request (request-parameter and response-model set-up)
take one to two seconds of CPU on an idle machine and several on a busy one, all of it
blocking the event loop. Paid on the first rollout's call, every rollout then in flight waits
for it: at 1,000 in flight that alone put seconds on each rollout's time. So a server whose
implementation uses the SDK pays it at start-up, before it reports healthy, in a thread: it
imports the SDK, makes one chat completion through an in-memory transport (no network), and
builds the event loop's shared connection pool (:mod:`rollgym.servers.sdk_pool`).

Which servers: those whose implementation's own modules (outside rollgym) mention ``openai``
in their source (``rollout.async_openai()``, ``rollout.openai()``, ``import openai``). A class
can say so itself with ``uses_openai_sdk = True`` (or ``False``) when the source cannot tell.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_SAMPLE_ANSWER = {
    "id": "chatcmpl-warmup",
    "object": "chat.completion",
    "created": 0,
    "model": "warmup",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "ok"},
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
_SAMPLE_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


#: A call or import of the SDK in a server's source (what the start check counts as a need;
#: a mere mention, such as a model named "openai", is not one).
_SDK_USE = re.compile(r"\.(?:async_)?openai\(|^\s*(?:import|from)\s+openai\b", re.MULTILINE)


def _own_sources(cls: type) -> Iterator[str]:
    """The source of each module of ``cls``'s classes outside rollgym (unreadable ones left out)."""
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if module is None or klass.__module__.split(".")[0] in ("rollgym", "builtins"):
            continue
        try:
            yield inspect.getsource(module)
        except (OSError, TypeError):
            continue


def uses_sdk(cls: type) -> bool:
    """Whether ``cls`` (a server implementation) uses the OpenAI SDK, as far as its own
    modules' source says (or its ``uses_openai_sdk`` attribute, when set)."""
    declared = getattr(cls, "uses_openai_sdk", None)
    if isinstance(declared, bool):
        return declared
    return any("openai" in source for source in _own_sources(cls))


def needs_sdk(cls: type) -> bool:
    """Whether ``cls`` cannot play a rollout without the SDK: it says so
    (``uses_openai_sdk``), or its own source calls ``rollout.async_openai()`` /
    ``rollout.openai()`` or imports ``openai`` (the start check refuses such a server where
    the package is missing, instead of failing every rollout)."""
    declared = getattr(cls, "uses_openai_sdk", None)
    if isinstance(declared, bool):
        return declared
    return any(_SDK_USE.search(source) for source in _own_sources(cls))


def _warm_in_thread() -> None:
    """Import the SDK and make one request through an in-memory transport."""
    from rollgym.servers.sdk_pool import http_library, require_openai

    openai = require_openai()
    http = http_library()

    def answer(request: object) -> Any:
        return http.Response(200, json=_SAMPLE_ANSWER)

    with http.Client(transport=http.MockTransport(answer)) as client:
        sdk = openai.OpenAI(
            base_url="http://warmup.invalid/v1", api_key="warmup", http_client=client, max_retries=0
        )
        sdk.chat.completions.create(
            model="warmup",
            messages=[{"role": "user", "content": "ok"}],
            tools=[_SAMPLE_TOOL],
            max_tokens=1,
        )


async def warm_up_if_used(cls: type) -> bool:
    """At a server's start: warm the SDK when ``cls`` uses it and it is installed; True when
    it did. A failure is logged, never raised: the first rollout then pays as before."""
    if not uses_sdk(cls) or importlib.util.find_spec("openai") is None:
        return False
    try:
        await asyncio.to_thread(_warm_in_thread)
        from rollgym.servers.openai_sdk import _async_transport_class, _sync_transport_class
        from rollgym.servers.sdk_pool import async_pool

        _async_transport_class()
        _sync_transport_class()
        async_pool()
    except Exception as error:  # warming is an optimisation; never fail a start on it
        log.warning("could not warm up the OpenAI SDK at start-up: %s", error)
        return False
    return True
