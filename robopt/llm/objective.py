"""A language policy's terms in a policy-gradient loss, beside the generic surrogate: PPO's ``loss_terms``
(``robopt.algorithms.ppo``), handed over by the language run's variant (``robopt.llm.variant``).

Shapes: B rows, T completion tokens. Read from what the policy stored when it acted (``info``): ``mask`` [B, T]
(valid tokens), ``log_prob`` [B, T] and ``ref_log_prob`` [B, T] (the reference model's, when the policy's
``config.kl_coef`` > 0). A policy that stores none of them gets no term and no metric.
"""

from __future__ import annotations

import torch

from robopt.core.losses import kl_estimate
from robopt.core.surrogates import masked_mean

__all__ = ["token_terms"]


def token_terms(
    policy, log_ratio: torch.Tensor, info: dict[str, torch.Tensor], with_metrics: bool
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """(penalty to add to the policy loss or None, metrics): the reference-KL penalty kl_coef x masked mean of the
    per-token KL estimate (``kl_estimate`` of log pi = log pi_act + log_ratio against log pi_ref), and the
    completion length and token NLL of the acting pass (no forward pass)."""
    mask, metrics, penalty = info.get("mask"), {}, None
    ref_coef = getattr(getattr(policy, "config", None), "kl_coef", 0.0)
    if ref_coef > 0.0 and "ref_log_prob" in info:  # a language policy's KL penalty to its reference model
        estimator = policy.config.kl_estimator
        reference = masked_mean(kl_estimate(info["log_prob"] + log_ratio, info["ref_log_prob"], estimator), mask)
        penalty = ref_coef * reference
        if with_metrics:
            metrics["reference_kl"] = reference.detach()
    if with_metrics and mask is not None:  # language: from the acting pass's stored numbers, no forward pass
        metrics["completion_length"] = mask.sum(-1).float().mean()  # tokens per completion, stop included
        metrics["token_nll"] = -masked_mean(info["log_prob"], mask)  # -log pi_act(a_t): a per-token entropy estimate
    return penalty, metrics
