"""Off-policy actor-critic losses as pure functions (SAC, TD3 and DDPG as a TD3 config).

Shapes: B batch, C critics (2 for SAC and TD3, 1 for DDPG), A action dim.
A replay batch's ``discount`` is the bootstrap factor (gamma, or gamma^k after an n-step transform) and
``terminated`` alone stops the bootstrap: a truncated transition bootstraps from its (final) next observation.

- ``soft_q_target``: y = r + discount (1 - terminated) (min_c Q'_c(s', a') - alpha log pi(a'|s')), a' ~ pi(s').
  SAC (Haarnoja et al. 2018, eq. 3 with the clipped double-Q of Fujimoto et al. 2018); ``alpha = 0`` or no
  log-probability gives TD3's and DDPG's target.
- ``q_regression_loss``: scale * sum_c mean_b w_b (Q_c(s, a) - y)^2 with importance weights w (prioritized replay);
  SB3 uses scale 0.5 for SAC and 1 for TD3. Returns the TD error |mean_c Q_c - y| [B] for priority updates.
- ``sac_actor_loss``: mean(alpha log pi(a~|s) - min_c Q_c(s, a~)), a~ reparameterized from pi(s).
- ``temperature_loss``: -mean(log_alpha (log pi(a~|s) + target_entropy)), the automatic entropy temperature of
  Haarnoja et al. 2018b (sec. 5), with the target entropy usually -A.
- ``deterministic_actor_loss``: -mean(Q_1(s, mu(s))) (TD3 and DDPG).
- ``smoothed_target_action``: TD3's target policy smoothing clip(mu'(s') + clip(eps, -c, c), low, high).
- ``polyak_update``: theta' <- tau theta + (1 - tau) theta', in place.
- ``expectile_loss``: |tau - 1(u < 0)| u^2 per row for u = target - prediction: IQL's asymmetric regression of
  V(s) toward an upper expectile of Q(s, a) over the data's actions (Kostrikov et al. 2022, eq. 5).
- ``advantage_weights``: min(exp(beta A), w_max), IQL's advantage-weighted extraction (AWR; eq. 7).
- ``aggregate_q``: min or mean over critics, [C, B] -> [B] (FQL and EXPO pick per task).
- ``sampled_advantage``: OGPO's advantage of M actions sampled per state from the critics' values q [C, S, M]:
  A = Q(s, a_m) - mean_m Q(s, a_m) (the sample-mean baseline), either of the critics' mean or two-sided
  conservative (per critic, kept only where every critic agrees on its sign, and then the smallest in magnitude),
  optionally divided by the per-state (or batch) standard deviation (variance reduction).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def soft_q_target(
    reward: torch.Tensor,
    discount: torch.Tensor | float,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor | None = None,
    alpha: torch.Tensor | float = 0.0,
) -> torch.Tensor:
    """Bootstrapped target [B] from next_q [C, B] (min over critics); entropy term when ``next_log_prob`` is given."""
    next_value = next_q.min(0).values if next_q.dim() == 2 else next_q  # [B]
    if next_log_prob is not None:
        next_value = next_value - alpha * next_log_prob
    return reward + discount * (~terminated).to(reward.dtype) * next_value


def q_regression_loss(
    q: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None = None, scale: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, td_error [B]): scale * sum over critics of the weighted mean squared error of q [C, B] to target [B]."""
    if q.dim() == 1:
        q = q.unsqueeze(0)
    error = q - target.detach().unsqueeze(0)  # [C, B]
    squared = error.square()
    per_critic = squared.mean(1) if weights is None else (squared * weights.unsqueeze(0)).mean(1)  # [C]
    return scale * per_critic.sum(), error.detach().mean(0).abs()


def sac_actor_loss(q: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """mean(alpha log pi - min_c Q_c) for q [C, B] of reparameterized actions and their log_prob [B]."""
    q_min = q.min(0).values if q.dim() == 2 else q
    return (alpha * log_prob - q_min).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-mean(log_alpha (log pi + target_entropy)); the log-probabilities carry no gradient here."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def deterministic_actor_loss(q_first: torch.Tensor) -> torch.Tensor:
    """-mean Q_1(s, mu(s)) for q_first [B]."""
    return -q_first.mean()


def smoothed_target_action(
    action: torch.Tensor,
    noise_std: float,
    noise_clip: float,
    low: torch.Tensor,
    high: torch.Tensor,
    generator: torch.Generator | None = None,
    standard_normal: torch.Tensor | None = None,
) -> torch.Tensor:
    """clip(action + clip(N(0, noise_std^2), -noise_clip, noise_clip), low, high) [B, A] (TD3 target smoothing).

    ``noise_std`` and ``noise_clip`` are in the action's units (TD3 uses 0.2 and 0.5 for actions in [-1, 1]).
    ``standard_normal`` [B, A] is the N(0, 1) draw to use (drawn here from ``generator`` when None).
    """
    if noise_std <= 0.0:
        return torch.maximum(torch.minimum(action, high), low)
    if standard_normal is None:
        standard_normal = torch.randn(action.shape, generator=generator, device=action.device, dtype=action.dtype)
    noise = standard_normal * noise_std
    smoothed = action + noise.clamp(-noise_clip, noise_clip)
    return torch.maximum(torch.minimum(smoothed, high), low)


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float) -> None:
    """target <- tau * source + (1 - tau) * target, in place (tau = 1 copies)."""
    target, source = list(target), list(source)
    if len(target) != len(source):
        raise ValueError(f"polyak_update: {len(target)} target tensors for {len(source)} source tensors")
    torch._foreach_lerp_(target, source, tau)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """|expectile - 1(diff < 0)| * diff^2 per element, for diff = target - prediction (expectile 0.5: half the MSE)."""
    weight = torch.where(diff < 0.0, 1.0 - expectile, expectile)
    return weight * diff.square()


def advantage_weights(advantage: torch.Tensor, temperature: float, max_weight: float) -> torch.Tensor:
    """min(exp(temperature * advantage), max_weight) [B], without gradient (the weights of AWR extraction)."""
    return torch.exp(temperature * advantage.detach()).clamp(max=max_weight)


def aggregate_q(q: torch.Tensor, how: str) -> torch.Tensor:
    """q [C, B] -> [B]: ``min`` (clipped double-Q, pessimistic) or ``mean`` over critics."""
    if how not in ("min", "mean"):
        raise ValueError(f"aggregate_q: how must be 'min' or 'mean', got {how!r}")
    if q.dim() == 1:
        return q
    return q.min(0).values if how == "min" else q.mean(0)


def sampled_advantage(
    q: torch.Tensor, how: str = "conservative", norm: str = "state", eps: float = 1e-6
) -> torch.Tensor:
    """Advantages [S, M] of M sampled actions per state from critic values ``q`` [C, S, M] (no gradient).

    ``how``: ``mean`` takes the critics' mean Q then subtracts its mean over the M samples; ``conservative``
    subtracts each critic's own sample mean and keeps A only where all C critics agree on its sign, as the one
    closest to 0 (an action is pushed up only when every critic ranks it above the others, and down likewise).
    ``norm``: ``state`` divides by the std over the M samples of each state (+ eps), ``batch`` by the std of all
    S x M advantages, ``none`` leaves them in Q's units.
    """
    if how not in ("mean", "conservative") or norm not in ("state", "batch", "none"):
        raise ValueError(f"sampled_advantage: how (mean, conservative), norm (state, batch, none); got {how}, {norm}")
    q = q.detach()
    if q.dim() == 2:
        q = q.unsqueeze(0)
    per_critic = q - q.mean(-1, keepdim=True)  # [C, S, M]
    if how == "mean":
        advantage = per_critic.mean(0)
    else:
        agree = (per_critic > 0).all(0) | (per_critic < 0).all(0)
        smallest = per_critic.abs().min(0).values * per_critic[0].sign()
        advantage = torch.where(agree, smallest, torch.zeros_like(smallest))
    if norm == "state":
        advantage = advantage / (advantage.std(-1, keepdim=True, unbiased=False) + eps)
    elif norm == "batch":
        advantage = advantage / (advantage.std(unbiased=False) + eps)
    return advantage
