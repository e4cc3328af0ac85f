"""The single-turn arithmetic environment: compute an expression, answer it exactly.

A task row holds ``{"question": "12 + 7 * 3"}`` or ``{"a": 12, "b": 7, "op": "*"}`` (``op`` is
one of ``+ - * /`` or ``add sub mul div``). The reward is 1.0 when the final answer equals the
exact value (decimals within ``tolerance``, relative), else 0.0.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import ClassVar

from rollgym.builtins.answer_text import extract_answer
from rollgym.builtins.arith import evaluate, format_number, parse_number
from rollgym.builtins.envs.options import ArithmeticOptions
from rollgym.servers import Environment, ServerContext, ServerOptions, SessionState, Verdict

SYSTEM_PROMPT = "You are a careful calculator. Reply with the final result as 'Answer: <number>'."
_ONE = Fraction(1)
_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "add": "+", "sub": "-", "mul": "*", "div": "/"}


def expression_of(task: Mapping[str, object]) -> str:
    """The expression a task asks for; ValueError/KeyError when the task has none."""
    question = task.get("question")
    if isinstance(question, str) and question.strip():
        return question.strip()
    if question is not None:
        raise ValueError("'question' must be a non-empty string")
    a, b, op = task["a"], task["b"], task["op"]
    for key, value in (("a", a), ("b", b)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key!r} must be a number, got {value!r}")
    if op not in _OPS:
        raise ValueError(f"'op' must be one of {sorted(_OPS)}, got {op!r}")
    return f"{a} {_OPS[op]} {b}"


class ArithmeticEnv(Environment):
    """Compute one expression in one turn."""

    Options: ClassVar[type[ServerOptions]] = ArithmeticOptions
    options: ArithmeticOptions

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        #: The relative tolerance as an exact fraction, parsed once rather than per answer.
        self._tolerance = Fraction(str(self.options.tolerance))

    async def seed(self, task: Mapping[str, object]) -> SessionState:
        expression = expression_of(task)
        expected = evaluate(expression)
        prompt = f"Compute: {expression}\nReply with 'Answer: <number>'."
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        return SessionState(
            messages=messages, data={"expected": expected, "expression": expression}
        )

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        expected: Fraction = state.data["expected"]
        text = extract_answer(answer)
        got = parse_number(text)
        tolerance = self._tolerance * max(_ONE, abs(expected))
        correct = got is not None and abs(got - expected) <= tolerance
        details = {
            "expected": format_number(expected),
            "answer": _echo(text),
            "parsed": got is not None,
        }
        return Verdict(reward=1.0 if correct else 0.0, details=details)


#: Most characters of the answer the verdict's details repeat: the whole answer is already the
#: agent's (and the trajectory's); a 5 MB reply must not come back twice more in the details.
ANSWER_ECHO_MAX_CHARS = 1024


def _echo(text: str) -> str:
    """``text`` for the details: cut past :data:`ANSWER_ECHO_MAX_CHARS`, saying so."""
    if len(text) <= ANSWER_ECHO_MAX_CHARS:
        return text
    return f"{text[:ANSWER_ECHO_MAX_CHARS]}... (cut: {len(text)} characters in all)"
