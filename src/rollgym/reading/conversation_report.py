"""``rollgym traces show RUN ID --conversation``: what the model said, read from the run's files.

The trajectory holds the messages (the trace store holds none of their text); the store, when
the run has one, adds each model call's latency, matched by the engine's response id on the
model span. Every text printed came from a model or an environment, so all of it goes through
:func:`rollgym.reading.render.safe` (no markup, no terminal escapes reach the console).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from rollgym.reading.query_rows import SpanRow
from rollgym.reading.render import safe
from rollgym.reading.run_reader import RolloutFiles
from rollgym.reading.token_view import LOW_P, model_turns, turn_tokens
from rollgym.telemetry import names
from rollgym.trajectory.conversation import Entry, conversation

#: Characters of one text shown in the terminal; longer ones are cut and marked (--json: all).
SHOWN_CHARS = 2000
#: Tokens of one model call shown in the terminal; the rest are counted (--json: all).
SHOWN_TOKENS = 500


def model_latencies(spans: Sequence[SpanRow]) -> dict[str, float]:
    """``{response id: milliseconds}`` of the model spans of a rollout's traces."""
    latencies: dict[str, float] = {}
    for span in spans:
        response_id = span["attributes"].get(names.GEN_AI_RESPONSE_ID)
        if span["name"] == names.SPAN_MODEL_CHAT and isinstance(response_id, str):
            latencies[response_id] = float(span["duration_ms"])
    return latencies


def records_trajectories(run_dir: Path) -> bool | None:
    """Whether the run asked for trajectories (``run.json``'s ``defines``: trajectories or
    tokens); None when it does not say (no run.json, or one from an older rollgym)."""
    try:
        defines = orjson.loads((run_dir / "run.json").read_bytes()).get("defines")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(defines, dict) or "trajectories" not in defines:
        return None
    return bool(defines.get("trajectories") or defines.get("capture_tokens"))


def verdict_details(trajectory: Mapping[str, object] | None) -> list[object]:
    """The ``details`` of each verification in the trajectory, in order: why the reward is
    what it is, as the environment's verifier said (``{"expected": "44", ...}``)."""
    turns = (trajectory or {}).get("turns")
    if not isinstance(turns, list):
        return []
    return [
        turn.get("details")
        for turn in turns
        if isinstance(turn, dict) and turn.get("type") == "verify"
    ]


def conversation_view(
    rollout_id: str,
    files: RolloutFiles,
    latencies: dict[str, float],
    *,
    tokens: bool = True,
    low_p: float = LOW_P,
    recorded: bool | None = None,
) -> dict[str, Any]:
    """What ``--conversation --json`` prints: the header fields and the entries. With
    ``tokens`` each model answer of a run that captured tokens carries its generated tokens
    (``tokens``: ids, log-probabilities, text where known, those under ``low_p`` marked).
    A failed rollout shows the turns it recorded before it failed (``partial``), the agent
    author's own ``frames`` and the ``log`` holding its whole traceback; ``recorded``: whether
    the run asked for trajectories (its run.json), which decides what a missing one means."""
    record = files.rollout or {}
    failure = files.failure if files.rollout is None else None
    trajectory = files.trajectory
    partial = (failure or {}).get("partial_trajectory") if trajectory is None else None
    if isinstance(partial, dict):  # the turns a failed rollout recorded before it failed
        trajectory = partial
    entries: list[Entry] = conversation(trajectory) if trajectory else []
    for entry in entries:
        response_id = entry.get("response_id")
        if entry.get("kind") == "answer" and isinstance(response_id, str):
            latency = latencies.get(response_id)
            entry["latency_ms"] = latency
    shown: list[dict[str, Any]] = [dict(entry) for entry in entries]
    details = iter(verdict_details(trajectory))
    for step in shown:  # each verification with the verifier's own reasons
        if step.get("kind") == "verify":
            step["details"] = next(details, None)
    if tokens:  # each answer is one model turn, in order
        answers = (step for step in shown if step.get("kind") == "answer")
        for step, turn in zip(answers, model_turns(trajectory), strict=False):
            found = turn_tokens(turn, low_p)
            if found is not None:
                step["tokens"] = found
    return {
        "rollout_id": record.get("rollout_id") or (failure or {}).get("rollout_id") or rollout_id,
        "outcome": "ok" if files.rollout is not None else ("failed" if failure else None),
        "reward": record.get("reward"),
        "dispatch_name": record.get("dispatch_name") or (failure or {}).get("dispatch_name"),
        "error_kind": (failure or {}).get("error_kind"),
        "message": (failure or {}).get("message"),
        "has_trajectory": trajectory is not None,
        "partial": trajectory is not None and trajectory is partial,
        "frames": (failure or {}).get("frames"),
        "log": (failure or {}).get("log"),
        "run_records_trajectories": recorded,
        "tokens_asked": tokens,
        "low_p": low_p,
        "conversation": shown,
    }


def _lines(text: str) -> str:
    """Inert text with its line breaks kept (each line indented under its speaker)."""
    return "\n  ".join(safe(line) for line in text.split("\n"))


def _cut(text: str | None) -> str:
    if text is None:
        return "[dim](no text)[/]"
    if len(text) <= SHOWN_CHARS:
        return _lines(text)
    return _lines(text[:SHOWN_CHARS]) + f" [yellow]... ({len(text)} chars; --json shows all)[/]"


def _tool_calls(calls: Sequence[Mapping[str, object]]) -> str:
    shown = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            shown.append(f"{function.get('name')}({function.get('arguments')})")
    return safe(", ".join(shown))


def _truncated(entry: Mapping[str, Any]) -> str:
    size = entry.get("truncated_bytes")
    return f" [yellow](cut at the recorded cap; whole text {size} bytes)[/]" if size else ""


def _token_cell(token: Mapping[str, Any]) -> str:
    """``id "text" p=0.93``; an unlikely token marked ``!`` (red on a terminal)."""
    text = token.get("text")
    shown = f" {safe(orjson.dumps(text).decode())}" if isinstance(text, str) else ""
    p = token.get("p")
    figure = f"p={p:.2f}" if isinstance(p, float) else "p=-"
    cell = f"{token.get('id') if token.get('id') is not None else '?'}{shown} {figure}"
    return f"[bold red]!{cell}[/]" if token.get("low") else cell


def _print_tokens(console: Console, found: Mapping[str, Any]) -> None:
    tokens: list[Mapping[str, Any]] = found["tokens"]
    source = found["text_source"]
    how = f"text from the {source}" if source else "ids only: no text aligned with them"
    console.print(
        f"  [dim]tokens[/]: {len(tokens)} generated, {found['low']} with p < "
        f"{found['threshold']:g} (marked !); {how}"
    )
    if found["missing"]:
        console.print(
            f"  [yellow]the engine did not answer[/]: {safe(', '.join(found['missing']))}"
        )
    cells = [_token_cell(token) for token in tokens[:SHOWN_TOKENS]]
    for start in range(0, len(cells), 6):
        console.print("    " + "  ".join(cells[start : start + 6]))
    if len(tokens) > SHOWN_TOKENS:
        console.print(f"    [yellow]... {len(tokens) - SHOWN_TOKENS} more (--json shows all)[/]")


def _print_entry(console: Console, entry: Mapping[str, Any]) -> None:
    kind = entry.get("kind")
    if kind == "message":
        console.print(f"[bold]{safe(entry.get('role'))}[/]{_truncated(entry)}")
        console.print(f"  {_cut(entry.get('content'))}")
        if entry.get("tool_calls"):
            console.print(f"  [cyan]tool calls[/]: {_tool_calls(entry['tool_calls'])}")
    elif kind == "answer":
        latency = entry.get("latency_ms")
        figures = (
            f"call {entry.get('call')}: {entry.get('input_tokens') or '-'} tokens in, "
            f"{entry.get('output_tokens') or '-'} out"
            + (f", {latency:.1f} ms" if isinstance(latency, int | float) else "")
            + f", finish {safe(entry.get('finish_reason') or '-')}"
        )
        console.print(f"[bold green]assistant[/] [dim]({figures})[/]")
        if entry.get("content") is not None or not entry.get("tool_calls"):
            console.print(f"  {_cut(entry.get('content'))}")
        if entry.get("tool_calls"):
            console.print(f"  [cyan]tool calls[/]: {_tool_calls(entry['tool_calls'])}")
        if entry.get("tokens"):
            _print_tokens(console, entry["tokens"])
    elif kind == "tool":
        arguments = orjson.dumps(entry.get("arguments")).decode()
        console.print(
            f"[bold magenta]tool {safe(entry.get('name'))}[/]({safe(arguments)}){_truncated(entry)}"
        )
        console.print(f"  {_cut(entry.get('output'))}")
    elif kind == "verify":
        reward = entry.get("reward")
        console.print(
            f"[bold]verify[/] answer={_cut(entry.get('answer'))} "
            f"reward={'-' if reward is None else f'{reward:.3f}'}"
        )
        details = entry.get("details")
        if details is not None:
            shown = orjson.dumps(details, option=orjson.OPT_SORT_KEYS).decode()
            console.print(f"  [dim]details (the verifier's reasons)[/]: {_cut(shown)}")


def print_frames(console: Console, frames: object, log: object) -> None:
    """Where the agent's own code raised (innermost last) and the log with the whole
    traceback: what a failure record says beyond its message."""
    if isinstance(frames, list) and frames:
        console.print("  [bold]raised in the agent's own code[/] (innermost last):")
        for frame in frames:
            console.print(f"    {safe(frame)}")
    if isinstance(log, str):
        console.print(f"  whole traceback: [cyan]{safe(log)}[/] in the run directory")


def print_conversation(console: Console, view: dict[str, Any]) -> None:
    header = f"[bold]{safe(view['rollout_id'])}[/]"
    if view["dispatch_name"]:
        header += f" dispatch={safe(view['dispatch_name'])}"
    if view["outcome"] == "ok":
        reward = view["reward"]
        header += f" outcome=ok reward={'-' if reward is None else f'{reward:.3f}'}"
    console.print(header)
    if view["outcome"] == "failed":
        console.print(
            f"[bold red]failed[/]: {safe(view['error_kind'])}: {safe(view['message'] or '')}"
        )
        print_frames(console, view.get("frames"), view.get("log"))
    if not view["has_trajectory"]:
        if view["outcome"] == "failed" and view.get("run_records_trajectories"):
            console.print(
                "[yellow]no turn recorded for this rollout[/]: the run records trajectories, "
                "but it failed before its agent recorded a model call (or its agent keeps "
                "none); `rollgym traces show RUN ID` shows its spans"
            )
        else:
            console.print(
                "[yellow]no trajectory recorded for this rollout[/]: the messages are kept "
                "only when the run records trajectories (run.trajectories=true); "
                "`rollgym traces show RUN ID` shows its spans"
            )
        return
    if view.get("partial"):
        console.print(
            "[yellow]partial trajectory[/]: the turns recorded before the rollout failed "
            "(kept in failures.jsonl; never in trajectories.jsonl)"
        )
    for entry in view["conversation"]:
        _print_entry(console, entry)
    if view.get("tokens_asked") and not any(e.get("tokens") for e in view["conversation"]):
        console.print(
            "[yellow]no token ids recorded for this rollout[/]: they are kept only when the run "
            "sets run.capture_tokens=true"
        )
