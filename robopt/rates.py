"""The action rate limit shared by training (robopt.envs) and the deploy runtime (robopt.sim2real): numpy only.

Shapes: A action dim.
"""

from __future__ import annotations

import numpy as np

__all__ = ["limit_rate"]


def limit_rate(target: np.ndarray, last: np.ndarray, max_delta, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``target`` [A] moved at most ``max_delta`` [A] from ``last`` [A] (None: no limit), within [low, high].

    The rate limit of the deploy runtime's safety layer (robopt.sim2real.safety), shared with training under deploy
    conditions (robopt.envs.deploy_conditions). The final clamp only undoes rounding when target and last are in
    bounds.
    """
    if max_delta is None:
        return np.minimum(np.maximum(target, low), high)
    step = np.minimum(np.maximum(target - last, -max_delta), max_delta)
    return np.minimum(np.maximum(last + step, low), high)
