"""Diagonal Gaussian policy, optionally tanh-squashed, with a state-independent or state-dependent log-std.

Shapes: B batch (or N envs), D obs dim, A action dim, K = 1 for this policy's log-ratio.
State-independent (the default, as PPO and TRPO use it): one learned log-std vector [A]. State-dependent (SAC's
usual actor, as in Haarnoja et al. 2018 and Stable-Baselines3): the network's last layer has 2A outputs, the mean
and log-std heads, and the log-std is clamped to [LOG_STD_MIN, LOG_STD_MAX].
``act`` stores in ``info``: ``log_prob`` [B], ``mean`` [B, A], ``log_std`` [B, A] and, when squashed,
``pre_tanh`` [B, A]; ``log_ratio`` and ``kl`` read them back.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from robopt.core.normalization import FrozenNormalizer, RunningNormalizer
from robopt.core.protocols import Memoryless
from robopt.envs.history import HISTORY_DOC, check_history
from robopt.options import option
from robopt.policies.cells import RecurrentConfig
from robopt.policies.networks import MLP


@dataclass(frozen=True)
class GaussianPolicyConfig:
    """The Gaussian policy's section; ``policy.name`` picks another kind's dataclass (``POLICY_CONFIGS``)."""

    name: str = option("gaussian", "policy kind (gaussian, flow)", ("gaussian",))
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths of the mean network")
    activation: str = option("tanh", "hidden activation", ("tanh", "relu", "elu", "silu"))
    log_std_init: float = option(0.0, "initial log standard deviation of the Gaussian")
    squash: bool = option(False, "tanh-squash actions into the env bounds (otherwise clip)")
    normalize_obs: bool = option(True, "running observation normalization inside the policy")
    orthogonal_init: bool = option(True, "orthogonal weight initialization")
    state_dependent_std: bool = option(False, "log-std from a second network head (SAC's usual actor) not a vector")
    history: int = option(1, HISTORY_DOC)
    recurrent: RecurrentConfig = option(
        RecurrentConfig(),
        "memory: policy.recurrent.type=gru|lstm puts a recurrent torso in front of the actor's and "
        "the critic's MLPs (PPO, TRPO; robopt.policies.recurrent)",
    )

    def __post_init__(self) -> None:
        check_history(self.history)
        if self.recurrent.enabled and self.state_dependent_std:
            raise ValueError(
                "policy.recurrent needs a state-independent log-std (the on-policy Gaussian's): set "
                "policy.state_dependent_std=false"
            )


LOG_2PI = math.log(2.0 * math.pi)
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # clamp of a state-dependent log-std (the common SAC bounds)


class GaussianPolicy(nn.Module, Memoryless):
    """pi(a|s) = N(mu(norm(s)), diag(exp(log_std))^2); with ``squash``, a = low + (tanh(u) + 1) (high - low) / 2."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: torch.Tensor,
        action_high: torch.Tensor,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        squash: bool = False,
        normalize_obs: bool = True,
        orthogonal_init: bool = True,
        state_dependent_std: bool = False,
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.squash = obs_dim, action_dim, squash
        self.state_dependent_std, self.log_std_init = state_dependent_std, float(log_std_init)
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        out_dim = 2 * action_dim if state_dependent_std else action_dim  # mean (and log-std) heads
        self.mean_net = MLP(obs_dim, out_dim, hidden, activation, output_gain=0.01, orthogonal_init=orthogonal_init)
        if not state_dependent_std:
            self.log_std = nn.Parameter(torch.full((action_dim,), self.log_std_init))
        self.register_buffer("action_low", torch.as_tensor(action_low, dtype=torch.float32).reshape(action_dim))
        self.register_buffer("action_high", torch.as_tensor(action_high, dtype=torch.float32).reshape(action_dim))

    def distribution_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mean [B, A] and log_std [B, A] for obs [B, D]."""
        mean, log_std = self._params(obs)
        return mean, log_std.expand_as(mean)

    def _params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mean [B, A] and log_std: [A] when state-independent (broadcast), [B, A] when state-dependent."""
        if not self.state_dependent_std:
            return self._mean(obs), self.log_std
        out = self._net(obs)  # [B, 2A]
        mean, raw = out.split(self.action_dim, dim=-1)
        return mean, (raw + self.log_std_init).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def _net(self, obs: torch.Tensor) -> torch.Tensor:
        # The submodules' forward is called directly: nn.Module.__call__ and a disabled normalizer's call cost
        # about 8 us of the 60 us of a one-env act (module hooks are not run here).
        normalizer = self.normalizer
        return self.mean_net.forward(normalizer.forward(obs) if normalizer.enabled else obs)

    def _mean(self, obs: torch.Tensor) -> torch.Tensor:
        """mu(norm(s)) [B, A]."""
        out = self._net(obs)
        return out[..., : self.action_dim] if self.state_dependent_std else out

    def _to_env(self, sample: torch.Tensor) -> torch.Tensor:
        if not self.squash:
            return sample
        return self.action_low + (torch.tanh(sample) + 1.0) * 0.5 * (self.action_high - self.action_low)

    @staticmethod
    def _gaussian_log_prob(
        sample: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, std: torch.Tensor
    ) -> torch.Tensor:
        # log N(x; mu, sigma) summed over A = -sum_A (log sigma + 0.5 z^2) - A/2 log 2 pi, z = (x - mu) / sigma.
        # sample, mean [B, A]; log_std, std = exp(log_std) [A] broadcast or [B, A] (five ops: fewer autograd nodes).
        z = (sample - mean) / std  # [B, A]
        return torch.rsub(torch.addcmul(log_std, z, z, value=0.5).sum(-1), -0.5 * LOG_2PI * sample.shape[-1])

    def _squash_correction(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        # log |da/du| = sum log((high - low) / 2 * (1 - tanh(u)^2)); stable form 2 (log 2 - u - softplus(-2u))
        log_det = 2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))
        return (log_det + torch.log(0.5 * (self.action_high - self.action_low))).sum(-1)

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Sample (or take the mean of) the policy; returns action [B, A] and info for ``log_ratio``.

        Nothing returned carries gradient; info is a snapshot of the acting-time distribution (fresh tensors,
        never views of parameters).
        """
        if torch.is_grad_enabled():  # the loop acts under inference_mode; elsewhere keep outputs graph-free
            with torch.no_grad():
                return self.act(obs, deterministic)
        mean, log_std = self._params(obs)  # [B, A], [A] or [B, A]
        std = torch.exp(log_std)
        sample = mean if deterministic else mean + std * torch.randn_like(mean)  # [B, A]
        log_prob = self._gaussian_log_prob(sample, mean, log_std, std)  # [B]
        if self.squash:
            log_prob = log_prob - self._squash_correction(sample)
        info = {"log_prob": log_prob, "mean": mean, "log_std": log_std.expand_as(mean).clone()}
        if self.squash:
            info["pre_tanh"] = sample
        return self._to_env(sample), info

    def mean_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action mu(s) in env units [B, A], differentiable (TD3 and DDPG's actor)."""
        return self._to_env(self._mean(obs))

    def rsample(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized sample in env units [B, A] and its log-probability [B], both differentiable (SAC).

        ``noise`` [B, A] is the standard normal to use (drawn here when None): a compiled update draws it outside
        its graph so that eager and compiled steps see the same numbers.
        """
        mean, log_std = self._params(obs)
        std = torch.exp(log_std)
        sample = mean + std * (torch.randn_like(mean) if noise is None else noise)
        log_prob = self._gaussian_log_prob(sample, mean, log_std, std)
        if self.squash:
            log_prob = log_prob - self._squash_correction(sample)
        return self._to_env(sample), log_prob

    def _sample_of(self, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        return info["pre_tanh"] if self.squash else action

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """log pi(action | obs) [B] (squashed: includes the tanh Jacobian, needs ``info['pre_tanh']``)."""
        mean, log_std = self._params(obs)
        sample = self._sample_of(action, info)
        log_prob = self._gaussian_log_prob(sample, mean, log_std, torch.exp(log_std))
        return log_prob - self._squash_correction(sample) if self.squash else log_prob

    def imitation_loss(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: -log pi(action | obs) [B]; squashed policies invert the tanh on the clipped action."""
        if not self.squash:
            return -self.log_prob(obs, action, {})
        unit = (action - self.action_low) / (self.action_high - self.action_low) * 2.0 - 1.0  # in [-1, 1]
        pre_tanh = torch.atanh(unit.clamp(-1.0 + 1e-6, 1.0 - 1e-6))
        return -self.log_prob(obs, action, {"pre_tanh": pre_tanh})

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """log pi_new(a|s) - log pi_old(a|s) as [B, 1]; exactly 0 at the acting parameters.

        Squashed: the tanh Jacobian cancels in the difference, but it is subtracted from the new log-prob (the
        same operations as ``act``) rather than added back to the old one, so the result is exactly 0 at the old
        parameters instead of off by a rounding of (g - c) + c.
        """
        mean, log_std = self._params(obs)
        sample = self._sample_of(action, info)
        new = self._gaussian_log_prob(sample, mean, log_std, torch.exp(log_std))  # [B]
        if self.squash:
            new = new - self._squash_correction(sample)  # no gradient: depends on the stored sample only
        return (new - info["log_prob"]).unsqueeze(-1)

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """KL(pi_old || pi_new) [B] between diagonal Gaussians (closed form; tanh is a bijection, KL unchanged)."""
        mean, log_std = self.distribution_params(obs)
        old_mean, old_log_std = info["mean"], info["log_std"]
        var_ratio = torch.exp(2.0 * (old_log_std - log_std))
        mean_term = (old_mean - mean).square() * torch.exp(-2.0 * log_std)
        return (log_std - old_log_std + 0.5 * (var_ratio + mean_term) - 0.5).sum(-1)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Entropy of the (unsquashed) Gaussian [B]: sum(log_std + 0.5 log(2 pi e))."""
        if self.state_dependent_std:
            return (self._params(obs)[1] + 0.5 * (LOG_2PI + 1.0)).sum(-1)
        return (self.log_std + 0.5 * (LOG_2PI + 1.0)).sum().expand(obs.shape[0])

    def export_module(self) -> nn.Module:
        """Deterministic ``obs [B, D] -> action [B, A]`` with normalizer and bounds folded in."""
        return ExportedGaussianPolicy(self)


class ExportedGaussianPolicy(nn.Module):
    """Stateless deterministic action path of a GaussianPolicy: normalize, mean net, squash or clip."""

    def __init__(self, policy: GaussianPolicy) -> None:
        super().__init__()
        self.squash, self.action_dim = policy.squash, policy.action_dim
        self.normalizer = FrozenNormalizer(policy.normalizer)
        self.register_buffer("action_low", policy.action_low.detach().clone())
        self.register_buffer("action_high", policy.action_high.detach().clone())
        self.mean_net = copy.deepcopy(policy.mean_net).eval().requires_grad_(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean = self.mean_net(self.normalizer(obs))[..., : self.action_dim]  # a state-dependent net's log-std dropped
        if self.squash:
            return self.action_low + (torch.tanh(mean) + 1.0) * 0.5 * (self.action_high - self.action_low)
        return torch.maximum(torch.minimum(mean, self.action_high), self.action_low)
