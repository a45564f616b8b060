"""A task section's per-element term options (``scale``, ``noise``, ``bias``, ``clip``) as vectors over its block.

Shapes: W a term's width, D the section's block width (the terms' widths in order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def expand(value, width: int, term, section: str, option: str) -> torch.Tensor:
    """A term's option as [W] float64: one number for every element, or one per element (a one-line ValueError when
    their count is not the term's width)."""
    if isinstance(value, tuple):
        if len(value) != width:
            raise ValueError(f"task.{section}.{term.name}.{option}: {len(value)} values for a term of width {width}")
        return torch.tensor(value, dtype=torch.float64)
    return torch.full((width,), float(value), dtype=torch.float64)


def block_options(terms: Sequence, widths: Sequence[int], section: str, names: Sequence[str]) -> list[torch.Tensor]:
    """Each option of ``names`` over the whole block: [D] float64, the terms' vectors concatenated in order."""
    return [
        torch.cat([expand(getattr(term, name), width, term, section, name) for term, width in zip(terms, widths,
                                                                                                 strict=True)])
        for name in names
    ]  # fmt: skip


OPTIONS = ("scale", "noise", "bias", "clip")  # an observation term's per-element options, in this order


def refuse_noise(terms: Sequence, widths: Sequence[int], section: str) -> None:
    """A one-line ValueError when a term of ``section`` (the critic's) sets noise or bias: the critic learns from
    the true state; the actor's view is the noisy one."""
    for term, width in zip(terms, widths, strict=True):
        for name in ("noise", "bias"):
            if (expand(getattr(term, name), width, term, section, name) != 0).any():
                raise ValueError(
                    f"task.{section}.{term.name}.{name}: the critic sees the privileged state as it is; noise and "
                    "bias apply to task.observations (scale and clip apply to both)"
                )
