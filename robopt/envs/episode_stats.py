"""Per-environment episode return and length bookkeeping, shared by every VecEnv backend.

Shapes: N envs. Backends that step in numpy (the Gymnasium adapter) keep the counters as numpy arrays,
the others as torch tensors on the env device; the arithmetic is the same for both.
"""

from __future__ import annotations

import numpy as np
import torch


class EpisodeTracker:
    """Accumulates undiscounted return and length per env; reports and clears rows that ended."""

    def __init__(self, num_envs: int, device: torch.device | None) -> None:
        """``device=None`` keeps the counters as numpy arrays and takes numpy inputs in ``update``."""
        if device is None:
            self.returns = np.zeros(num_envs, dtype=np.float64)  # [N]
            self.lengths = np.zeros(num_envs, dtype=np.int64)  # [N]
        else:
            self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)  # [N]
            self.lengths = torch.zeros(num_envs, dtype=torch.int64, device=device)  # [N]

    def reset(self) -> None:
        """Forget every running episode (called by ``VecEnv.reset``)."""
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def update(self, reward, done):
        """Add reward [N]; for rows with done [N] return (episode_return [N] float32, episode_length [N] int64).

        Rows that did not end get 0 in both outputs.
        """
        self.returns += reward
        self.lengths += 1
        episode_return, episode_length = self.returns * done, self.lengths * done
        keep = ~done  # multiply rather than index: no device sync on GPU
        self.returns *= keep
        self.lengths *= keep
        if isinstance(episode_return, np.ndarray):
            return episode_return.astype(np.float32), episode_length
        return episode_return.to(torch.float32), episode_length


class EnvLog:
    """Means of the scalar statistics an env reports under ``info["log"]`` (Isaac Lab's ``extras["log"]``), over
    the steps that reported each one (or over what a (sum, count) pair counts); logged as ``env/<name>``."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, info: dict) -> None:
        """A value, or a (sum, count) pair: a mean over what the count counts (episodes that ended) across steps."""
        for name, value in info.get("log", {}).items():
            total, count = value if isinstance(value, tuple) else (value, 1)
            self.sums[name] = self.sums.get(name, 0.0) + total
            self.counts[name] = self.counts.get(name, 0) + count

    def values(self) -> dict[str, float]:
        return {
            f"env/{name}": float(total) / float(self.counts[name])
            for name, total in self.sums.items()
            if float(self.counts[name]) > 0
        }
