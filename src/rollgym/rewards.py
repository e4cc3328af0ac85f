"""What counts as a reward: one check, shared by the driver and the servers.

A reward is an ``int`` or ``float`` that is finite. ``True`` is an ``int`` to Python but not a
reward (an agent answering ``{"reward": true}`` has a bug worth seeing), and NaN or infinity
would poison every mean and pass@k computed from it.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def is_reward(value: object) -> TypeGuard[int | float]:
    """True for a finite int or float that is not a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)
