"""Safe arithmetic: parse and evaluate ``12 + 7 * 3`` exactly, without ``eval``.

Shared by the arithmetic environment (the expected answer) and the simulated policy (which
really computes it), so the two agree by construction. Values are exact fractions.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable
from fractions import Fraction

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
#: Longest expression accepted: a guard against pathological inputs, not a feature limit.
MAX_LENGTH = 500
#: ``a op b`` of two integers (each may carry a ``-``), the form of every ``{a, b, op}`` task:
#: what Python's parser reads as the same two numbers and one operator. ASCII digits only and
#: no leading zero (``07`` is a syntax error to the parser), single spaces or none between.
_TWO_INTEGERS = re.compile(r"(-?)(0|[1-9][0-9]*) ?([-+*/]) ?(-?)(0|[1-9][0-9]*)")
_OPERATORS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


@functools.lru_cache(maxsize=4096)
def evaluate(expression: str) -> Fraction:
    """The exact value of an expression of numbers, + - * /, unary minus and parentheses.

    Raises ``ValueError`` for anything else (names, calls, powers, division by zero).

    Cached (a task's repeats, the environment's answer and the policy's, evaluate the same
    text), and ``a op b`` of two integers, the form of every ``{a, b, op}`` task, skips the
    parser (``ast.parse`` and compiling were most of the CPU here); the value and every error
    are the same either way (a test compares the two on many expressions).
    """
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    simple = _TWO_INTEGERS.fullmatch(expression.strip())
    if simple is not None:
        left_sign, left, op, right_sign, right = simple.groups()
        a = -int(left) if left_sign else int(left)
        b = -int(right) if right_sign else int(right)
        if op == "/" and b == 0:
            raise ValueError("division by zero")
        return _OPERATORS[op](Fraction(a), Fraction(b))
    return _parsed(expression)


def _parsed(expression: str) -> Fraction:
    """:func:`evaluate` by Python's parser: any expression it accepts."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> Fraction:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        number = node.value
        # An int is exact as it is (and skips Fraction's string parse, the costliest step
        # here); a float by its shortest decimal, so 0.1 is 1/10 rather than its binary double.
        return Fraction(number) if isinstance(number, int) else Fraction(str(number))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"unsupported element in expression: {ast.dump(node)[:60]}")


def format_number(value: Fraction) -> str:
    """An integer as digits, anything else as a decimal with up to 6 places."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def parse_number(text: str) -> Fraction | None:
    """``"33"``, ``"-2.5"``, ``"7/2"`` -> a Fraction; None when it is not a number.

    Plain ASCII digits (the usual answer) skip ``Fraction``'s string parse: the same value."""
    stripped = text.strip()
    if len(stripped) > MAX_ANSWER_CHARS or _huge_exponent(stripped):
        return None  # a model's answer, not a number we would ever ask for
    try:
        if stripped.isascii() and stripped.isdigit():
            return Fraction(int(stripped))
        return Fraction(stripped.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


#: Longer answers are not numbers (and ``int()`` refuses over 4,300 digits anyway).
MAX_ANSWER_CHARS = 4000
#: ``Fraction("1e99999999")`` computes ten to that power: minutes of CPU for one answer.
MAX_EXPONENT = 1000
_EXPONENT = re.compile(r"[eE]\s*[+-]?\s*(\d+)")


def _huge_exponent(text: str) -> bool:
    match = _EXPONENT.search(text)
    if match is None:
        return False
    digits = match.group(1).lstrip("0")
    return len(digits) > len(str(MAX_EXPONENT)) or int(digits or "0") > MAX_EXPONENT
