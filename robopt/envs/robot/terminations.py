"""Termination terms: ``fn(signals, **params) -> [N] bool``, each declared once (``robopt.envs.robot.terms``).

A termination ends the episode with ``terminated=True`` (no bootstrap); the time limit (``task.episode_s``) is
not a term: it truncates (bootstrapped from the final observation), and the two are never merged.
"""

from __future__ import annotations

import math

import torch

from robopt.envs.robot.signals import Signals
from robopt.envs.robot.terms import FLOATING, contacts, term
from robopt.options import ANGLE, FINITE, NAMES


@term("termination", needs=(FLOATING,), params={"angle": ANGLE})
def fall(s: Signals, angle: float = 1.0) -> torch.Tensor:
    """The base tilts more than ``angle`` (rad) from upright: projected gravity's z above -cos(angle)."""
    return s.projected_gravity[:, 2] > -math.cos(angle)


@term("termination", needs=(contacts("bodies"),), params={"bodies": NAMES})
def body_contact(s: Signals, bodies: list) -> torch.Tensor:
    """A body matching ``bodies`` (regular expressions: the trunk, the head) touches anything."""
    return s.body_contacts(tuple(bodies)) > 0


@term("termination", needs=(FLOATING,), params={"height": FINITE})
def base_too_low(s: Signals, height: float) -> torch.Tensor:
    """The base origin drops below ``height`` (m) above the floor."""
    return s.base_height < height
