"""What a language run adds to the generic on-policy run: the loop's hooks and the policy-loss terms.

The language policy kind's registry entry (``robopt.policies.POLICIES["language"]``) names ``on_policy_variant`` and
the ``group`` config section it reads; the on-policy builder (``robopt.algorithms.kinds.on_policy``) asks the entry
of the run's policy kind for them, so a robot run gets neither. The hooks are group sampling (``group.enabled``:
GRPO's group-relative advantages, DAPO's dynamic sampling and refill) or the task counters alone
(``robopt.llm.group_sampling``); the loss terms are the reference-KL penalty and the token metrics
(``token_terms``), for an update that adds policy-loss terms (PPO's).

Shapes of the loss terms: B rows, T completion tokens. They read what the policy stored when it acted (``info``):
``mask`` [B, T] (valid tokens), ``log_prob`` [B, T] and ``ref_log_prob`` [B, T] (the reference model's, when the
policy's ``config.kl_coef`` > 0). A policy that stores none of them gets no term and no metric.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robopt.core.losses import kl_estimate
from robopt.core.surrogates import masked_mean
from robopt.llm.group_sampling import TaskCounters, hooks_for
from robopt.options import ConfigError

__all__ = ["on_policy_variant", "token_terms"]


def on_policy_variant(config, env, adds_loss_terms: bool) -> tuple[TaskCounters, Callable | None]:
    """(loop hooks, policy-loss terms or None) of a language run of ``config`` on ``env``.

    ``adds_loss_terms``: whether the run's update adds policy-loss terms (PPO does, TRPO does not). Without them the
    reference-KL penalty (``policy.kl_coef`` > 0) would silently vanish, so it is a one-line ConfigError.
    """
    if not adds_loss_terms and config.policy.kl_coef > 0.0:
        raise ConfigError(
            f"policy.kl_coef={config.policy.kl_coef} (the reference-KL penalty) is a term of the PPO loss, which this "
            "algorithm's update does not add; set policy.kl_coef=0"
        )
    return hooks_for(config.group, env), token_terms if adds_loss_terms else None


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
