"""Per-environment episode return and length bookkeeping, shared by every VecEnv backend.

Shapes: N envs.
"""

from __future__ import annotations

import torch


class EpisodeTracker:
    """Accumulates undiscounted return and length per env; reports and clears rows that ended."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)  # [N]
        self.lengths = torch.zeros(num_envs, dtype=torch.int64, device=device)  # [N]

    def reset(self) -> None:
        """Forget every running episode (called by ``VecEnv.reset``)."""
        self.returns.zero_()
        self.lengths.zero_()

    def update(self, reward: torch.Tensor, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add reward [N]; for rows with done [N] return (episode_return [N] float32, episode_length [N] int64).

        Rows that did not end get 0 in both outputs.
        """
        self.returns += reward.to(torch.float64)
        self.lengths += 1
        episode_return = torch.where(done, self.returns, torch.zeros_like(self.returns)).to(torch.float32)
        episode_length = torch.where(done, self.lengths, torch.zeros_like(self.lengths))
        self.returns.masked_fill_(done, 0.0)
        self.lengths.masked_fill_(done, 0)
        return episode_return, episode_length
