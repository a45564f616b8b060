"""A user's term, imported by ``hook: tests.robots.hooks:height_bonus`` in the robot tests."""

from __future__ import annotations

import torch


def height_bonus(signals, target: float = 0.3) -> torch.Tensor:
    """base height - target [N] (m)."""
    return signals.base_height - target


def broken(signals) -> torch.Tensor:
    """A hook with a bug: it reads a quantity Signals does not have."""
    return signals.no_such_quantity
