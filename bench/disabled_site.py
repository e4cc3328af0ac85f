"""Cost of the disabled span site at the real dispatch call site, as a ratio to the same code
without it.

The measured function is the driver's own ``Dispatcher.send_attempt`` (imported, not copied),
run with telemetry never set up, so ``gate.rollout`` is closed. Its reference is the same
dispatcher with the telemetry branch taken out of the method that holds the site
(``Dispatcher._send``, the POST itself, since the dispatch window wraps it): that method's
source is read with :mod:`inspect` and the ``if gate.rollout: ... else: <work>`` statement is
replaced by ``<work>`` with :mod:`ast`, then compiled in the module's own namespace. Whatever the site looks like next week, the bench
measures it, and the difference between the two is exactly the gate check.

The HTTP client is the one dependency replaced: an object whose ``post_json`` answers a
finished ``HttpResponse`` at once, so the dispatch code is all there is to time (worst case
for the ratio). Both run interleaved in one event loop, several repeats, minimum of each.
Target (TELEMETRY.md "Cost when off"): ratio <= 1.5.

    python bench/disabled_site.py
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
import time
from typing import Any

from rollgym.driver import dispatch
from rollgym.driver.dispatch import Dispatcher
from rollgym.driver.rows import Rollout, Target, TaskRow
from rollgym.http.client import HttpResponse
from rollgym.telemetry.groups import configure_gate, gate

TARGET = 1.5


class _AnsweringClient:
    """Answers every POST with ``{"reward": 1}`` without a socket: only dispatch code is timed."""

    def __init__(self) -> None:
        self.answer = HttpResponse(200, {"reward": 1}, "")

    async def post_json(self, server: str, url: str, body: Any, **kw: Any) -> HttpResponse:
        return self.answer


#: The Dispatcher method that holds the dispatch's ``if gate.rollout:`` site.
SITE = "_send"


class _DropGatedBranch(ast.NodeTransformer):
    """``if gate.<flag>: <traced> else: <work>`` -> ``<work>``, nested sites included."""

    def visit_If(self, node: ast.If) -> Any:  # noqa: N802 - ast visitor naming
        test = node.test
        if (
            isinstance(test, ast.Attribute)
            and isinstance(test.value, ast.Name)
            and test.value.id == "gate"
        ):
            kept: list[ast.stmt] = []
            for stmt in node.orelse:  # a nested gated site is stripped too
                visited = self.visit(stmt)
                kept.extend(visited if isinstance(visited, list) else [visited])
            return kept or [ast.Pass()]
        return self.generic_visit(node)


def without_telemetry(method: Any) -> Any:
    """``method`` recompiled from its own source with its gated branch removed."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    stripped = ast.fix_missing_locations(_DropGatedBranch().visit(tree))
    if ast.dump(stripped) == ast.dump(ast.parse(textwrap.dedent(inspect.getsource(method)))):
        raise SystemExit(f"{method.__qualname__} has no `if gate.<group>:` site any more")
    namespace = dict(vars(dispatch))
    exec(compile(stripped, inspect.getsourcefile(method) or "<site>", "exec"), namespace)  # noqa: S102
    return namespace[method.__name__]


def _rollout() -> Rollout:
    target = Target(dispatch_name="agent", server_name="agent", episode=False)
    task = TaskRow(task_index=0, line=1, row={"q": 1}, explicit_id=None, target=target)
    return Rollout(task, 0)


async def _time(call: Any, dispatcher: Dispatcher, rollout: Rollout, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        await call(dispatcher, rollout, 0)
    return (time.perf_counter() - start) / number * 1e9


async def measure(number: int = 100_000, repeat: int = 7) -> tuple[float, float]:
    """(real site ns per dispatch, same code without the site), minimum over repeats."""
    configure_gate((), tracing_active=False)
    assert not gate.rollout
    servers = {"agent": "http://127.0.0.1:1"}
    dispatcher = Dispatcher(_AnsweringClient(), servers, 5.0)  # type: ignore[arg-type]
    bare_class = type(
        "DispatcherWithoutSite", (Dispatcher,), {SITE: without_telemetry(getattr(Dispatcher, SITE))}
    )
    bare_dispatcher = bare_class(_AnsweringClient(), servers, 5.0)
    rollout = _rollout()
    call = Dispatcher.send_attempt
    outcome = await call(dispatcher, rollout, 0)
    assert outcome.reward == 1.0 and outcome == (await call(bare_dispatcher, rollout, 0))._replace(
        started_at=outcome.started_at, duration_s=outcome.duration_s
    )
    site_t, bare_t = [], []
    for _ in range(repeat):
        bare_t.append(await _time(call, bare_dispatcher, rollout, number))
        site_t.append(await _time(call, dispatcher, rollout, number))
    return min(site_t), min(bare_t)


def main() -> int:
    site, bare = asyncio.run(measure())
    ratio = site / bare
    print("Dispatcher.send_attempt, telemetry off, against an answering in-process client")
    print(f"without the site (same source, branch removed): {bare:8.1f} ns per dispatch")
    print(f"real dispatch site (gate closed):               {site:8.1f} ns per dispatch")
    print(f"ratio (target <= {TARGET}): {ratio:.3f}  (difference {site - bare:+.1f} ns)")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
