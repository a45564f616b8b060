"""Value losses (pure functions returning (loss, metrics)) and the per-element KL estimators of a reference-KL
penalty (``kl_estimate``). Shapes: B batch, L tokens."""

from __future__ import annotations

import torch
from torch.nn import functional

KL_ESTIMATORS = ("k1", "k2", "k3")
"""Values accepted by ``kl_estimate(estimator=...)``."""


def value_error(
    value: torch.Tensor, return_target: torch.Tensor, old_value: torch.Tensor | None = None, clip: float | None = None
) -> torch.Tensor:
    """mean (V - R)^2, optionally PPO's clipped form (Schulman et al. 2017, OpenAI baselines):

    mean max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2). Unclipped, it is one fused ``mse_loss``
    (one autograd node instead of three on the per-minibatch path).

    Args:
        value: [B] current V(s).  return_target: [B].  old_value: [B] V at collection time.  clip: c or None.
    """
    if clip is None or old_value is None:
        return functional.mse_loss(value, return_target)
    clipped_value = old_value + torch.clamp(value - old_value, -clip, clip)
    return torch.maximum((value - return_target).square(), (clipped_value - return_target).square()).mean()


def value_loss(
    value: torch.Tensor, return_target: torch.Tensor, old_value: torch.Tensor | None = None, clip: float | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * ``value_error``: 0.5 * mean (V - R)^2, or its clipped form when ``clip`` and ``old_value`` are given.

    Args:
        value: [B] current V(s).  return_target: [B].  old_value: [B] V at collection time.  clip: c or None.
    """
    loss = 0.5 * value_error(value, return_target, old_value, clip)
    return loss, {"value_loss": loss.detach()}


@torch.no_grad()
def explained_variance(value: torch.Tensor, return_target: torch.Tensor) -> torch.Tensor:
    """1 - Var(R - V) / Var(R): 1 is a perfect critic, 0 no better than a constant."""
    return 1.0 - (return_target - value).var() / return_target.var().clamp_min(1e-8)


def kl_estimate(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Elementwise estimate of KL(p || q) from samples x ~ p (Schulman 2020, "Approximating KL divergence").

    p is the current policy, q the reference, log r = log q(x) - log p(x): k1 = -log r (unbiased, can be < 0);
    k2 = (log r)^2 / 2 (biased, low variance); k3 = (r - 1) - log r (unbiased and >= 0; GRPO's KL term).

    Args:
        log_prob: log p(x), any shape (e.g. [B, L] per token).
        ref_log_prob: log q(x), the same shape.
        estimator: one of ``KL_ESTIMATORS``.

    Returns:
        The estimate per element, the shape of ``log_prob``; average it (e.g. ``robopt.core.surrogates.masked_mean``)
        for the KL.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator={estimator!r} is unknown; allowed: {', '.join(KL_ESTIMATORS)}")
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"ref_log_prob shape {list(ref_log_prob.shape)} does not match log_prob {list(log_prob.shape)}"
        )
    log_r = ref_log_prob - log_prob
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    return torch.expm1(log_r) - log_r  # expm1: exact near r = 1, where k3 ~ (log r)^2 / 2
