"""EXPO's acting rule for a flow policy: N base samples, a bounded Gaussian edit of each, the argmax-Q of all 2N.

Shapes: B batch, N base samples, A action dim, D obs dim; y actions in the policy's normalized units.

With ``policy.edit_bound`` b > 0 a flow policy (``robopt.policies.flow``) holds, beside its velocity field (the
base policy, cloned) and its critics (``policy.guide``), an edit policy

    delta = b tanh(u),   u ~ N(mu_e(s, y), sigma_e(s, y)^2)      (a tanh-squashed Gaussian scaled to |delta| <= b)

and acts by: draw y_1..y_N from the base flow (x_0 ~ N(0, I); deterministically, N fixed noise vectors with the
first at 0, drawn once when the policy is built and kept with its weights), edit each (deterministic: u = mu_e),
and take the candidate among {y_i, y_i + delta_i} (clipped to the bounds) with the highest mean-over-critics
Q(s, a). The whole rule is tensor operations (``argmax``, ``gather``), so it exports to TorchScript and ONNX with
the critics and the edit network folded in.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robopt.policies.networks import MLP

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class EditPolicy(nn.Module):
    """pi_e(delta | s, y): a tanh-squashed Gaussian on [norm(s), y] scaled to |delta| <= bound, per action dim."""

    def __init__(self, obs_dim: int, action_dim: int, hidden, activation: str, bound: float) -> None:
        super().__init__()
        self.bound, self.action_dim = float(bound), action_dim
        self.net = MLP(obs_dim + action_dim, 2 * action_dim, hidden, activation, 0.01, True)

    def _gaussian(self, obs_norm: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net.forward(torch.cat((obs_norm, y), dim=-1)).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def deterministic(self, obs_norm: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.bound * torch.tanh(self._gaussian(obs_norm, y)[0])

    def rsample(self, obs_norm: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(delta [B, A], log pi_e(delta | s, y) [B]) by reparameterization, with the tanh and scale Jacobians."""
        mean, log_std = self._gaussian(obs_norm, y)
        u = mean + log_std.exp() * torch.randn_like(mean)
        log_prob = -0.5 * (((u - mean) / log_std.exp()).square() + 2.0 * log_std + math.log(2.0 * math.pi))
        # delta = b tanh(u): log|d delta / du| = log b + log(1 - tanh(u)^2), in the stable softplus form
        log_jacobian = math.log(self.bound) + 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        return self.bound * torch.tanh(u), (log_prob - log_jacobian).sum(-1)


def fixed_noise(samples: int, action_dim: int, seed: int = 0) -> torch.Tensor:
    """[N, A] base noise of the deterministic action: the first row 0 (the flow's own mode), then N(0, I) draws."""
    noise = torch.randn(samples, action_dim, generator=torch.Generator().manual_seed(seed))
    noise[0] = 0.0
    return noise


def select(policy, obs: torch.Tensor, obs_norm: torch.Tensor, deterministic: bool, integrate_fn) -> torch.Tensor:
    """EXPO's action [B, A] in env units (clipped): the argmax-Q of N base samples and their edits."""
    batch, samples, A = obs.shape[0], policy.config.expo_samples, policy.action_dim
    obs_rep = obs.repeat_interleave(samples, dim=0)  # [B * N, D], rows b*N .. b*N + N - 1 belong to b
    norm_rep = obs_norm.repeat_interleave(samples, dim=0)
    if deterministic:
        x0 = policy.expo_noise.repeat(batch, 1)  # [B * N, A]
    else:
        x0 = torch.randn(batch * samples, A, dtype=obs_norm.dtype, device=obs.device) * policy.config.noise_std
    base = integrate_fn(policy.velocity, norm_rep, x0, policy.config.steps, policy.config.integrator)
    delta = policy.edit.deterministic(norm_rep, base) if deterministic else policy.edit.rsample(norm_rep, base)[0]
    candidates = torch.stack((base, base + delta))  # [2, B * N, A]
    actions = policy.clip(policy.to_env(candidates))
    q = policy.guide(obs_rep.repeat(2, 1), actions.reshape(-1, A)).mean(0)  # [2 * B * N]
    q = q.reshape(2, batch, samples).permute(1, 0, 2).reshape(batch, 2 * samples)  # [B, 2N]
    flat = actions.reshape(2, batch, samples, A).permute(1, 0, 2, 3).reshape(batch, 2 * samples, A)
    best = q.argmax(dim=1)  # [B]
    return torch.gather(flat, 1, best.view(batch, 1, 1).expand(batch, 1, A)).squeeze(1)
