"""The built-in arithmetic: exact values, decimals read as written, and the verify tolerance.

Both the environment's expected answer and the simulated policy's reply come from
``evaluate``, so an inexact value here would make a correct answer score 0.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from rollgym.builtins.arith import evaluate
from rollgym.builtins.envs.arithmetic import ArithmeticEnv


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12 + 7 * 3", Fraction(33)),
        ("7 / 2", Fraction(7, 2)),
        ("0.1 + 0.2", Fraction(3, 10)),  # decimals as written, not as binary doubles
        ("-(3 - 1.5) / 4", Fraction(-3, 8)),
        ("123456789012345678901234567890 * 1", Fraction(123456789012345678901234567890)),
        ("1e3 + 1", Fraction(1001)),
    ],
)
def test_evaluate_is_exact(expression: str, value: Fraction) -> None:
    got = evaluate(expression)
    assert got == value
    assert type(got) is Fraction


@pytest.mark.parametrize("expression", ["1 / 0", "True + 1", "x + 1", "2 ** 3", "print(1)"])
def test_evaluate_refuses_what_is_not_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError):
        evaluate(expression)


@pytest.mark.parametrize(
    ("answer", "reward"),
    [("Answer: 0.3", 1.0), ("Answer: 0.3000001", 1.0), ("Answer: 0.31", 0.0), ("none", 0.0)],
)
async def test_verify_applies_the_relative_tolerance(answer: str, reward: float) -> None:
    env = ArithmeticEnv.build("arith", {"tolerance": 1e-6})
    state = await env.seed({"question": "0.1 + 0.2"})
    verdict = await env.verify(state, answer)
    assert verdict.reward == reward


def _outcome(evaluate_: object, expression: str) -> Fraction | str:
    try:
        value = evaluate_(expression)  # type: ignore[operator]
    except ValueError:
        return "ValueError"
    assert type(value) is Fraction
    return value


def test_the_two_integer_short_way_is_the_parser_exactly() -> None:
    from itertools import product

    from rollgym.builtins.arith import _parsed

    numbers = ["0", "7", "-7", "00", "07", "-0", "12", "1_0", "٣", "123456789012345678901"]
    spaces = ["", " ", "  ", "\t"]
    expressions = [
        f"{pad}{a}{s1}{op}{s2}{b}{pad}"
        for a, b, op, s1, s2, pad in product(numbers, numbers, "+-*/%", spaces, spaces, ["", " "])
    ]
    expressions += ["5 - - 3", "5--3", "-5 * -3", "- 5 + 1", "5 -- 3", "1 + 2\n", "+1 + 2"]
    for expression in expressions:
        evaluate.cache_clear()
        assert _outcome(evaluate, expression) == _outcome(_parsed, expression), expression


def test_a_plain_integer_answer_parses_as_fraction_does() -> None:
    from rollgym.builtins.arith import parse_number

    for text in ["12", " 12 ", "0", "007", "-3", "+3", "٣", "1_000", "1,000", "²", "", "x", "7/2"]:
        try:
            expected: Fraction | None = Fraction(text.strip().replace(",", ""))
        except (ValueError, ZeroDivisionError):
            expected = None
        assert parse_number(text) == expected, text


def test_a_hostile_answer_is_not_a_number_and_costs_no_time() -> None:
    """``Fraction("1e99999999")`` computes the power (minutes of CPU), and ``int()`` refuses
    more than 4,300 digits: a model's answer must be neither a hang nor an error."""
    from rollgym.builtins.arith import parse_number

    for text in ["1e99999999", "1E+99999999", "-2.5e-99999999", "9" * 5000, "1e" + "9" * 5000]:
        assert parse_number(text) is None, text[:20]
    assert parse_number("1e3") == 1000 and parse_number("2.5e-2") == Fraction(1, 40)
