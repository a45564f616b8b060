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
        if x.shape[0] == 0:  # nothing to merge (an empty batch would make the statistics NaN)
            return
        self.merge(float(x.shape[0]), x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, batch_count: float, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Merge a batch's count, mean [D] and biased variance [D] (float64) into the running statistics.

        ``update`` merges one tensor's rows; a data-parallel run merges the moments of every rank's rows
        (``robopt.distributed.Collective.moments``), so every rank keeps the same statistics.
        """
        if not self.enabled or batch_count == 0:
            return
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

    The discounted return per env resets on terminated or truncated; the scale is std(return). Step t of a
    rollout is divided by the std of every discounted return seen up to and including step t, exactly as a
    per-step scaler would, but the whole rollout is scaled at once after collection: a per-step scaler costs
    about twenty tensor operations per env step (~0.3 ms at one env on CPU), this one a few per step in a tight
    loop plus one batched pass (``benchmarks/ppo_vs_sb3.py --normalized``).
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNormalizer(1)
        self.register_buffer("discounted_return", torch.zeros(num_envs, dtype=torch.float64))

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, done: torch.Tensor, collective=None) -> torch.Tensor:
        """Scale reward [T, N] (or [N], one step); ``done`` marks rows whose episode ended at that step.

        ``collective`` (a data-parallel run's ``robopt.distributed.Collective``): the statistics are those of every
        rank's envs, so every rank scales by the same std.
        """
        if reward.dim() == 1:
            return self.forward(reward[None], done[None], collective)[0]
        steps, num_envs = reward.shape
        returns = torch.empty(steps, num_envs, dtype=torch.float64, device=reward.device)  # [T, N]
        running, keep = self.discounted_return, (~done).to(torch.float64)
        reward64 = reward.to(torch.float64)
        for t in range(steps):  # G_t = gamma G_{t-1} + r_t, then G_t = 0 where the episode ended at t
            torch.add(running.mul_(self.gamma), reward64[t], out=returns[t])
            torch.mul(returns[t], keep[t], out=running)
        var = self._running_variance(returns, collective)  # [T]: variance of all returns seen up to each step
        if collective is None:
            self.stats.update(returns.reshape(-1, 1))
        else:
            self.stats.merge(*collective.moments(returns.reshape(-1, 1)))
        std = torch.sqrt(var + self.eps).to(reward.dtype)
        return torch.clamp(reward / std[:, None], -self.clip, self.clip)

    def _running_variance(self, returns: torch.Tensor, collective=None) -> torch.Tensor:
        """Variance of the prior statistics merged with returns[:t + 1], for every t (Chan et al., with cumsums)."""
        stats = self.stats
        prior_count, prior_mean, prior_var = stats.count, stats.mean[0], stats.var[0]
        deviation = returns - prior_mean  # [T, N], shifted by the prior mean for accuracy
        sums = torch.stack((deviation.sum(1), deviation.square().sum(1)))  # [2, T]
        num_envs = returns.shape[1]
        if collective is not None:  # every rank's envs at each step
            collective.sum_(sums)
            num_envs *= collective.world_size
        new_count = torch.arange(1, returns.shape[0] + 1, device=returns.device) * num_envs  # [T]
        sum_dev = torch.cumsum(sums[0], 0)  # [T]
        sum_sq = torch.cumsum(sums[1], 0)  # [T]
        count = prior_count + new_count
        mean_shift = sum_dev / count  # mean - prior_mean
        return (prior_count * prior_var + sum_sq) / count - mean_shift.square()


class FrozenNormalizer(nn.Module):
    """A normalizer's current shift and scale as constants: the first layer of every exported policy.

    ``obs [B, D] -> clamp((obs - shift) * scale, -clip, clip)`` in float32 (identity when disabled).
    """

    def __init__(self, normalizer: RunningNormalizer) -> None:
        super().__init__()
        self.enabled, self.clip = normalizer.enabled, float(normalizer.clip)
        self.register_buffer("shift", normalizer.shift.detach().clone())
        self.register_buffer("scale", normalizer.scale.detach().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.to(torch.float32)
        if self.enabled:
            x = torch.clamp((x - self.shift) * self.scale, -self.clip, self.clip)
        return x
