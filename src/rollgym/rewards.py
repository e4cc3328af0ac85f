"""What counts as a reward: one check, shared by the driver and the servers.

A reward is an ``int`` or ``float`` that is finite. ``True`` is an ``int`` to Python but not a
reward (an agent answering ``{"reward": true}`` has a bug worth seeing), and NaN or infinity
would poison every mean and pass@k computed from it. A number of another real type (NumPy's
``float32`` or ``int64``: what a reward computed with NumPy often is) is the same number, so a
server takes it as the Python ``float`` or ``int`` it equals (:func:`plain_number`).
"""

from __future__ import annotations

import math
import numbers
from typing import TypeGuard


def is_reward(value: object) -> TypeGuard[int | float]:
    """True for a finite int or float that is not a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def plain_number(value: object) -> object:
    """``value`` as the Python ``int`` or ``float`` it equals when it is a real number of
    another type (NumPy's ``float32``, ``int64``); anything else as it is (a bool stays one)."""
    if isinstance(value, int | float) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)
