"""Value losses (pure functions returning (loss, metrics)). Shapes: B batch."""

from __future__ import annotations

import torch


def value_loss(
    value: torch.Tensor, return_target: torch.Tensor, old_value: torch.Tensor | None = None, clip: float | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * mean (V - R)^2, optionally PPO's clipped form (Schulman et al. 2017, OpenAI baselines):

    0.5 * mean max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2).

    Args:
        value: [B] current V(s).  return_target: [B].  old_value: [B] V at collection time.  clip: c or None.
    """
    squared = (value - return_target).square()
    if clip is not None and old_value is not None:
        clipped_value = old_value + torch.clamp(value - old_value, -clip, clip)
        squared = torch.maximum(squared, (clipped_value - return_target).square())
    loss = 0.5 * squared.mean()
    return loss, {"value_loss": loss.detach()}


@torch.no_grad()
def explained_variance(value: torch.Tensor, return_target: torch.Tensor) -> torch.Tensor:
    """1 - Var(R - V) / Var(R): 1 is a perfect critic, 0 no better than a constant."""
    return 1.0 - (return_target - value).var() / return_target.var().clamp_min(1e-8)
