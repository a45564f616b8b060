"""Learning-rate schedules as pure functions of training progress in [0, 1]."""

from __future__ import annotations

import math
from collections.abc import Callable

SCHEDULES = ("constant", "linear", "cosine")


def make_schedule(name: str, initial: float, final_fraction: float = 0.0) -> Callable[[float], float]:
    """Returns ``progress -> value``; progress 0 is the first update, 1 the last.

    constant: initial. linear: initial * (1 - progress * (1 - final_fraction)).
    cosine: final + (initial - final) * (1 + cos(pi * progress)) / 2 with final = initial * final_fraction.
    """
    final = initial * final_fraction
    if name == "constant":
        return lambda progress: initial
    if name == "linear":
        return lambda progress: initial + (final - initial) * min(max(progress, 0.0), 1.0)
    if name == "cosine":
        return lambda progress: (
            final + (initial - final) * 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
        )
    raise ValueError(f"unknown schedule {name!r}; allowed: {', '.join(SCHEDULES)}")
