"""Running statistics that live inside the policy (saved, restored and exported with it).

Shapes: B batch, D feature dim, N envs.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Observation normalizer with running mean/variance (Chan et al. parallel update); a module of the policy.

    Statistics are buffers, so ``state_dict`` carries them and ``export_module`` can fold them in.
    The on-policy loop updates it once per iteration, after the policy update, so the statistics a
    rollout was collected with are the ones its update sees (log-ratio exactly 0 at the old parameters).
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8, enabled: bool = True) -> None:
        super().__init__()
        self.dim, self.clip, self.eps, self.enabled = dim, clip, eps, enabled
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))
        # float32 shift and scale derived from the float64 statistics, refreshed whenever they change
        self.register_buffer("shift", torch.zeros(dim), persistent=False)
        self.register_buffer("scale", torch.ones(dim), persistent=False)
        self.register_load_state_dict_post_hook(lambda module, keys: module._refresh())

    @torch.no_grad()
    def _refresh(self) -> None:
        self.shift.copy_(self.mean.to(self.shift.dtype))
        self.scale.copy_(torch.rsqrt(self.var + self.eps).to(self.scale.dtype))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of x [B, D] into the running ones."""
        if not self.enabled:
            return
        x = x.reshape(-1, self.dim).to(torch.float64)
        batch_count = float(x.shape[0])
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * self.count * batch_count / total
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
        self._refresh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize x [B, D] (identity when disabled)."""
        if not self.enabled:
            return x
        return torch.clamp((x - self.shift) * self.scale, -self.clip, self.clip)


class RewardScaler(nn.Module):
    """Scales rewards by the running std of the discounted return (as SB3's VecNormalize / CleanRL do).

    The discounted return per env resets on terminated or truncated; the scale is std(return).
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNormalizer(1)
        self.register_buffer("discounted_return", torch.zeros(num_envs, dtype=torch.float64))

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Scale reward [N]; ``done`` [N] marks rows whose episode ended at this step."""
        self.discounted_return.mul_(self.gamma).add_(reward.to(torch.float64))
        self.stats.update(self.discounted_return.unsqueeze(-1))
        self.discounted_return.masked_fill_(done, 0.0)
        std = torch.sqrt(self.stats.var[0] + self.eps).to(reward.dtype)
        return torch.clamp(reward / std, -self.clip, self.clip)
