"""Policy surrogates on per-K log-ratios: one implementation, ratio controls as data.

Shapes: B batch, K inner log-ratio axis (see robopt.core.shapes); for a language policy K = L tokens with a
completion mask [B, L].
All functions are pure: ``(...) -> (loss, metrics)``; metrics are detached scalar tensors.

The single entry point for the PPO family is ``surrogate(log_ratio, advantage, control)``, where
``control`` is a ``RatioControl`` (frozen data, ``robopt.core.ratio_control``) naming how the probability ratio
``r`` is held near 1.

Names, the per-entry objective each maximizes (the loss is its negated reduction, by default the masked mean),
and the source:

- ``plain``: r A. TRPO (Schulman et al. 2015, eq. 14).
- ``clip``: min(r A, clip(r, 1 - eps, 1 + eps) A). PPO (Schulman et al. 2017, eq. 7).
- ``clip_asymmetric``: min(r A, clip(r, 1 - eps_low, 1 + eps_high) A). Clip-higher (DAPO, Yu et al. 2025).
- ``dual_clip``: the clip objective, and for A < 0 additionally max(., c A), c > 1. Ye et al. 2020, eq. 5.
- ``kl_penalty_adaptive``: r A - beta KL, beta doubled/halved against a target KL between updates.
  PPO-penalty (Schulman et al. 2017, sec. 4, eq. 8).
- ``spo_penalty``: r A - |A| / (2 eps) (r - 1)^2. Simple Policy Optimization (Xie et al. 2024).
- ``sigmoid_gate``: (4 / tau) sigmoid(tau (r - 1)) A, tau = tau_pos if A > 0 else tau_neg. Soft Adaptive
  Policy Optimization (SAPO, Gao et al. 2025, arXiv:2511.20347). Its gradient weight 4 sigmoid (1 - sigmoid)
  is 1 at r = 1 and decays smoothly instead of dropping to 0 at a hard band edge.

Ratio level (``RatioControl.level``):

- ``token``: r = exp(log_ratio) per entry, as the policy returns it (PPO, GRPO, DAPO).
- ``sequence``: r_b = exp(s_b), s_b = ``sequence_log_ratio`` = the masked mean of row b's log-ratios (the log of
  the geometric mean of its token ratios). GSPO (Zheng et al. 2025). ``surrogate`` expands s_b over the row
  ([B, 1] -> [B, K]): every valid entry of row b carries the same objective f(r_b, A) and the gradient reaches
  each valid token through s_b (d s_b / d log_ratio_bk = 1 / n_b); band, dual clip, penalties and gate act on
  r_b. GSPO proper is ``level=sequence`` with ``reduction="sequence_mean"``.

Reductions of the per-entry objective o (after weights) over the valid entries (``surrogate(reduction=...)``),
n_b the number of valid entries of row b:

- ``mean`` (default): sum_{b,k} o / sum_b n_b, the masked mean over all entries (PPO; every robot policy).
- ``token_mean``: the same number under its language-policy name (each valid token of the batch weighs the
  same): DAPO's token-level policy-gradient loss (Yu et al. 2025).
- ``sequence_mean``: mean over rows of (sum_k o_bk / n_b): each completion weighs the same whatever its length.
  GRPO (Shao et al. 2024). Rows without a valid entry are left out of the mean over rows.
- ``constant``: sum_{b,k} o / (B * normalizer), a constant (the maximum completion length) in place of lengths
  that depend on the sample. Dr. GRPO (Liu et al. 2025).

The ratio metrics (approx_kl, ratio_mean_abs_dev, ratio_max) are masked means over the token log-ratios whatever
the reduction and level (the KL early stop reads approx_kl); clip_fraction is the masked mean of the entries whose
objective ratio (r_b at sequence level) lies off its band.
The KL to a reference policy (k1/k2/k3 estimators) is ``robopt.core.losses.kl_estimate``.
"""

from __future__ import annotations

import torch

from robopt.core.ratio_control import RatioControl

REDUCTIONS = ("mean", "token_mean", "sequence_mean", "constant")
"""Values accepted by ``surrogate(reduction=...)``."""


def _broadcast_advantage(advantage: torch.Tensor, log_ratio: torch.Tensor) -> torch.Tensor:
    if advantage.dim() == 1:
        return advantage.unsqueeze(-1)  # [B] -> [B, 1], broadcast against [B, K] by the arithmetic
    if advantage.shape != log_ratio.shape:
        raise ValueError(f"advantage shape {list(advantage.shape)} does not match log_ratio {list(log_ratio.shape)}")
    return advantage


def masked_mean(value: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``value`` over entries where ``mask`` is true (all entries when mask is None)."""
    if mask is None:
        return value.mean()
    mask = mask.to(value.dtype)
    return (value * mask).sum() / mask.sum().clamp_min(1.0)


def sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """GSPO's sequence log-ratio (Zheng et al. 2025, eq. 7): the masked mean of each row's log-ratios.

    s_b = sum_k m_bk log_ratio_bk / n_b, the log of the geometric mean of the row's token ratios. Padded entries
    are read through ``torch.where``, so a NaN or inf there does not leak in; a row without a valid entry gives 0.

    Args:
        log_ratio: [B, K] per-token log(pi_new / pi_old).
        mask: optional [B, K] bool of valid tokens (None: all valid).

    Returns:
        [B, 1].
    """
    if mask is None:
        return log_ratio.mean(dim=-1, keepdim=True)
    mask = mask.bool().expand_as(log_ratio)
    total = torch.where(mask, log_ratio, torch.zeros_like(log_ratio)).sum(dim=-1, keepdim=True)  # [B, 1]
    return total / mask.sum(dim=-1, keepdim=True).clamp_min(1).to(log_ratio.dtype)


def _check_reduction(reduction: str, normalizer: float | None) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is unknown; allowed: {', '.join(REDUCTIONS)}")
    if reduction == "constant" and (normalizer is None or not normalizer > 0.0):
        raise ValueError(
            f"reduction='constant' needs normalizer > 0 (e.g. the maximum completion length), got {normalizer!r}"
        )


def _reduce(
    objective: torch.Tensor, mask: torch.Tensor | None, reduction: str = "mean", normalizer: float | None = None
) -> torch.Tensor:
    """The per-entry objective [B, K] reduced to a scalar over the valid entries (see the module table)."""
    if reduction in ("mean", "token_mean"):  # token_mean is mean under its DAPO name: one code path
        return masked_mean(objective, mask)
    rows = objective.reshape(objective.shape[0], -1)  # [B, K]
    valid = torch.ones_like(rows) if mask is None else mask.to(rows.dtype).expand_as(objective).reshape(rows.shape)
    if reduction == "constant":  # Dr. GRPO: a constant denominator, B * normalizer
        return (rows * valid).sum() / (rows.shape[0] * normalizer)
    count = valid.sum(dim=1)  # [B] n_b
    row_mean = (rows * valid).sum(dim=1) / count.clamp_min(1.0)  # [B]
    return row_mean.sum() / (count > 0).sum().clamp_min(1).to(rows.dtype)  # sequence_mean (GRPO)


def _clip_objective(
    ratio: torch.Tensor,
    advantage: torch.Tensor,
    clip_low: float | torch.Tensor,
    clip_high: float | torch.Tensor,
    with_mask: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) [B, K] and (``with_mask``) the mask of entries off the band."""
    if isinstance(clip_low, float) and isinstance(clip_high, float):  # scalars: fewer ops on the hot path
        lower, upper = 1.0 - clip_low, 1.0 + clip_high
        clipped_ratio = torch.clamp(ratio, lower, upper)
    else:  # per-K bounds
        lower = (1.0 - torch.as_tensor(clip_low)).to(ratio)
        upper = (1.0 + torch.as_tensor(clip_high)).to(ratio)
        clipped_ratio = torch.maximum(torch.minimum(ratio, upper), lower)
    objective = torch.minimum(ratio * advantage, clipped_ratio * advantage)  # [B, K]
    return objective, ((ratio < lower) | (ratio > upper)) if with_mask else None


def _finish(
    objective: torch.Tensor,
    log_ratio: torch.Tensor,
    weight: torch.Tensor | None,
    mask: torch.Tensor | None,
    clipped: torch.Tensor | None = None,
    with_metrics: bool = True,
    reduction: str = "mean",
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weight, mask, reduce and negate a per-entry objective [B, K] into a loss; metrics on the token log_ratio."""
    if weight is not None:
        objective = objective * weight
    metrics = ratio_metrics(log_ratio, mask, clipped=clipped) if with_metrics else {}
    return -_reduce(objective, mask, reduction, normalizer), metrics


def clipped_surrogate(
    log_ratio: torch.Tensor,
    advantage: torch.Tensor,
    clip_low: float | torch.Tensor = 0.2,
    clip_high: float | torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), negated so that it is minimized.

    L = -mean_{b,k} w_k * min(r A, clip(r, 1 - eps_low_k, 1 + eps_high_k) A),  r = exp(log_ratio).

    Args:
        log_ratio: [B, K] log(pi_new / pi_old).
        advantage: [B] or [B, K].
        clip_low: eps_low, scalar or [K] (per denoising step, per token...).
        clip_high: eps_high, scalar or [K]; None means symmetric (eps_high = eps_low).
        weight: optional [K] or [B, K] weights (e.g. DPPO's denoising discount).
        mask: optional [B, K] bool; padded entries (LLM) are excluded from the mean.
    """
    advantage = _broadcast_advantage(advantage, log_ratio)
    clip_high = clip_low if clip_high is None else clip_high
    objective, clipped = _clip_objective(torch.exp(log_ratio), advantage, clip_low, clip_high)
    return _finish(objective, log_ratio, weight, mask, clipped)


def plain_surrogate(
    log_ratio: torch.Tensor,
    advantage: torch.Tensor,
    weight: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped importance-weighted surrogate (TRPO, Schulman et al. 2015 eq. 14): -mean(r A)."""
    advantage = _broadcast_advantage(advantage, log_ratio)
    return _finish(torch.exp(log_ratio) * advantage, log_ratio, weight, mask)


@torch.no_grad()
def ratio_metrics(
    log_ratio: torch.Tensor, mask: torch.Tensor | None = None, clipped: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Approximate KL (k3 estimator, Schulman 2020: (r - 1) - log r), ratio drift and clip fraction."""
    ratio = torch.exp(log_ratio)
    metrics = {
        "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
        "ratio_mean_abs_dev": masked_mean((ratio - 1.0).abs(), mask),
        "ratio_max": ratio.max() if mask is None else ratio.masked_fill(~mask.bool(), 0.0).max(),
    }
    if clipped is not None:
        metrics["clip_fraction"] = masked_mean(clipped.to(log_ratio.dtype), mask)
    return metrics


def surrogate(
    log_ratio: torch.Tensor,
    advantage: torch.Tensor,
    control: RatioControl,
    weight: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    kl: torch.Tensor | None = None,
    with_metrics: bool = True,
    clip_range: torch.Tensor | None = None,
    reduction: str = "mean",
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The surrogate loss of the PPO/TRPO family under ``control`` (see the module table), negated to minimize.

    Args:
        log_ratio: [B, K] log(pi_new / pi_old).
        advantage: [B] or [B, K].
        control: which ratio control, with its constants.
        weight: optional [K] or [B, K] weights.
        mask: optional [B, K] bool of valid entries.
        kl: optional exact KL(pi_old || pi_new) per row [B] (``SupportsKL``) for ``kl_penalty_adaptive``;
            without it the penalty uses the k3 estimator (r - 1) - log r (Schulman 2020), unbiased under
            samples from pi_old.
        with_metrics: False skips every diagnostic, the clip mask included (a training loop's inner minibatches
            need only the loss); metrics is then empty.
        clip_range: optional per-entry eps (broadcastable to [B, K]) for ``clip``, ``clip_asymmetric`` and
            ``dual_clip``, replacing ``control.clip_low`` and ``clip_high`` (a symmetric band): DPPO's clip range
            that follows the denoising step.
        reduction: how the per-entry objective (after weights) becomes the loss: mean (default), token_mean,
            sequence_mean or constant (see the module table).
        normalizer: the constant of ``reduction="constant"`` (the maximum completion length); read only there.

    Returns:
        (loss, metrics): metrics hold approx_kl, ratio_mean_abs_dev, ratio_max and control-specific entries.
        With ``control.level == "sequence"`` the objective uses r_b = exp(``sequence_log_ratio``) expanded over
        each row; the ratio metrics stay on the token log-ratios (see the module table).
    """
    _check_reduction(reduction, normalizer)
    token_log_ratio = log_ratio  # [B, K]: what the ratio metrics describe
    if control.level == "sequence":  # GSPO: s_b [B, 1] over the row's valid tokens, expanded to [B, K]
        log_ratio = sequence_log_ratio(log_ratio, mask).expand_as(log_ratio)
    advantage = _broadcast_advantage(advantage, log_ratio)  # [B, K]
    ratio = torch.exp(log_ratio)  # [B, K]
    name = control.name
    reduce = {"reduction": reduction, "normalizer": normalizer}
    if name == "plain":
        return _finish(ratio * advantage, token_log_ratio, weight, mask, with_metrics=with_metrics, **reduce)
    if name in ("clip", "clip_asymmetric", "dual_clip"):
        clip_low = control.clip_low if clip_range is None else clip_range
        clip_high = clip_low if control.clip_high is None or clip_range is not None else control.clip_high
        objective, clipped = _clip_objective(ratio, advantage, clip_low, clip_high, with_metrics)
        if name != "dual_clip":
            return _finish(objective, token_log_ratio, weight, mask, clipped, with_metrics, **reduce)
        # Dual clip (Ye et al. 2020, eq. 5): for A < 0, max(min(rA, clip(r)A), cA) bounds the loss of huge r.
        floor = control.dual_clip * advantage
        dual = (advantage < 0) & (floor > objective)
        loss, metrics = _finish(
            torch.where(dual, floor, objective), token_log_ratio, weight, mask, clipped, with_metrics, **reduce
        )
        if with_metrics:
            metrics["dual_clip_fraction"] = masked_mean(dual.to(ratio.dtype), mask).detach()
        return loss, metrics
    if name == "kl_penalty_adaptive":
        # PPO-penalty (Schulman et al. 2017, eq. 8): r A - beta KL[pi_old, pi_new].
        kl_term = (ratio - 1.0) - log_ratio if kl is None else _broadcast_advantage(kl, log_ratio)  # [B, K]
        loss, metrics = _finish(
            ratio * advantage - control.kl_coef * kl_term, token_log_ratio, weight, mask, None, with_metrics, **reduce
        )
        if with_metrics:
            metrics["kl_coef"] = torch.tensor(control.kl_coef)
            metrics["kl_penalty"] = masked_mean(kl_term, mask).detach()
        return loss, metrics
    if name == "spo_penalty":
        # SPO (Xie et al. 2024, eq. 9): r A - |A| / (2 eps) (r - 1)^2; optimum at r = 1 + sign(A) eps.
        objective = ratio * advantage - advantage.abs() / (2.0 * control.spo_eps) * (ratio - 1.0) ** 2
        return _finish(objective, token_log_ratio, weight, mask, with_metrics=with_metrics, **reduce)
    # sigmoid_gate, SAPO (Gao et al. 2025, arXiv:2511.20347): f(r) = (4 / tau) sigmoid(tau (r - 1)), objective f(r) A.
    # d f / d r = 4 sigmoid (1 - sigmoid), which is 1 at r = 1 (the plain gradient on-policy) and decays smoothly.
    tau = torch.where(advantage > 0, control.gate_temperature_pos, control.gate_temperature_neg).to(ratio)
    gate = torch.sigmoid(tau * (ratio - 1.0))  # [B, K]
    loss, metrics = _finish(
        4.0 / tau * gate * advantage, token_log_ratio, weight, mask, with_metrics=with_metrics, **reduce
    )
    if with_metrics:
        metrics["gate_weight"] = masked_mean(4.0 * gate * (1.0 - gate), mask).detach()
    return loss, metrics
