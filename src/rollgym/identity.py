"""Rollout identity: the one derivation of a rollout id, shared by driver, servers and telemetry.

The driver stamps each dispatch onto the *collector row* (the task row plus
``task_index``, ``rollout_index`` and ``attempt``). The rollout id is then:

- the row's explicit ``rollout_id`` when present (``custom``); for ``rollout_index`` k > 0 of
  the same row, ``custom-r<k>`` so that repeats stay distinct;
- else ``<task_index>-<rollout_index>`` (``3-0``);
- attempts after the first add ``-a<attempt>`` (``3-0-a2``, ``custom-a2``).

:func:`request_id_of` spells the id of one model call of a rollout, ``<rollout id>.<turn>``
(``3-0.2``): the ``X-Request-Id`` sent upstream, so an engine's own id names the rollout;
:func:`rollout_of_request_id` reads it back.

Ids are UTF-8 text end to end. What an id may hold is :func:`id_problem`'s rule: any printable
text, nothing a terminal or an HTTP header cannot carry (control characters, lone surrogates,
line separators, bidirectional overrides); the driver refuses any other id at its row. An id
travels percent-encoded (UTF-8) wherever only ASCII goes: quoted into the rollout-scoped URL's
path (``/r/t%C3%A2che-1/v1``), and in a request id (:func:`request_id_of` encodes, so the
``X-Request-Id`` header, and the engine's own id built from it, are plain ASCII;
:func:`rollout_of_request_id` decodes). An id of printable ASCII without ``%`` is spelled as
it is, so ``3-0.2`` stays ``3-0.2``.

:func:`rollout_id_of` never raises: a row whose identity fields have the wrong types (an attempt
that is a list, an index that is a string) has no id, and telemetry simply omits the attribute.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, TypeGuard
from urllib.parse import quote, unquote

from rollgym.printable import first_unprintable

TASK_INDEX = "task_index"
ROLLOUT_INDEX = "rollout_index"
ATTEMPT = "attempt"
EXPLICIT_ID = "rollout_id"
#: Fields the driver owns on a collector row; an input row may not set them to other types.
STAMPED_FIELDS = (TASK_INDEX, ROLLOUT_INDEX, ATTEMPT)


def make_rollout_id(explicit: str | None, task_index: int, rollout_index: int, attempt: int) -> str:
    """The rollout id of one attempt (rules in the module docstring)."""
    if explicit is not None:
        base = explicit if rollout_index == 0 else f"{explicit}-r{rollout_index}"
    else:
        base = f"{task_index}-{rollout_index}"
    return base if attempt == 0 else f"{base}-a{attempt}"


def base_rollout_id(rollout_id: str, attempt: int | None) -> str:
    """The rollout id of attempt 0, from the id of attempt ``attempt`` (make_rollout_id's
    inverse: every attempt of a rollout maps to one id)."""
    suffix = f"-a{attempt}" if attempt else ""
    return rollout_id[: -len(suffix)] if suffix and rollout_id.endswith(suffix) else rollout_id


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool: what an identity field (and the row checks) accept."""
    return isinstance(value, int) and not isinstance(value, bool)


def rollout_id_of(row: Mapping[str, object]) -> str | None:
    """The rollout id of a collector row, or None when it cannot be derived. Never raises."""
    try:
        attempt = row.get(ATTEMPT, 0)
        rollout_index = row.get(ROLLOUT_INDEX, 0)
        if not (is_int(attempt) and is_int(rollout_index)) or attempt < 0 or rollout_index < 0:
            return None
        explicit = row.get(EXPLICIT_ID)
        if explicit is not None:
            if not isinstance(explicit, str) or not explicit:
                return None
            return make_rollout_id(explicit, 0, rollout_index, attempt)
        task_index = row.get(TASK_INDEX)
        if not is_int(task_index) or task_index < 0:
            return None
        return make_rollout_id(None, task_index, rollout_index, attempt)
    except Exception:  # a foreign Mapping may raise anything; identity is best effort
        return None


def episode_body(rollout_id: str, attempt: int, task: Mapping[str, object]) -> dict[str, object]:
    """The body posted to an environment's episode ``/run``: identity only as ``episode_id``."""
    return {"episode_id": {"rollout_id": rollout_id, "attempt": attempt}, "task": dict(task)}


def rollout_id_of_episode(body: Mapping[str, Any]) -> str | None:
    """The rollout id carried by an episode body, or None. Never raises."""
    try:
        value = body["episode_id"]["rollout_id"]
    except Exception:
        return None
    return value if isinstance(value, str) and value else None


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (its first character a terminal or a header cannot
    carry, named by code point and position), or None when it can."""
    position = first_unprintable(value)
    if position is None:
        return None
    return (
        f"character U+{ord(value[position]):04X} at position {position}: an id may hold any "
        "printable text, no control character, lone surrogate, line separator or "
        "bidirectional control"
    )


#: What a request id keeps as it is: printable ASCII but ``%`` (the escape's own sign).
_ID_SAFE: Final = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")
_NEEDS_ESCAPE: Final = re.compile(r"[^\x21-\x24\x26-\x7e]")


def wire_id(rollout_id: str) -> str:
    """An id as it travels where only ASCII goes (a header, an engine's request id): itself
    when it is printable ASCII without ``%``, else its UTF-8 percent-encoded."""
    if _NEEDS_ESCAPE.search(rollout_id) is None:
        return rollout_id
    return quote(rollout_id, safe=_ID_SAFE, errors="surrogatepass")


def id_of_wire(text: str) -> str:
    """:func:`wire_id`'s inverse (an id without an escape is itself)."""
    return unquote(text, errors="replace") if "%" in text else text


def request_id_of(rollout_id: str, turn: int) -> str:
    """``"3-0", 2`` -> ``"3-0.2"``: the one spelling of a model call's request id (the
    rollout id :func:`wire_id`-encoded: ``"tâche", 0`` -> ``"t%C3%A2che.0"``)."""
    return f"{wire_id(rollout_id)}.{turn}"


def rollout_of_request_id(request_id: str | None) -> str | None:
    """``"3-0.2"`` -> ``"3-0"`` (``"t%C3%A2che.0"`` -> ``"tâche"``); None unless the id has
    the ``<rollout id>.<turn>`` shape."""
    if not request_id:
        return None
    prefix, dot, turn = request_id.rpartition(".")
    return id_of_wire(prefix) if dot and prefix and turn.isdigit() else None


def header_text(value: str) -> str:
    """A header value as a server framework hands it (its bytes read as Latin-1) back as the
    UTF-8 text a client that did not percent-encode sent; ASCII is returned as it is."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value
