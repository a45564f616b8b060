"""What a language run adds to the generic on-policy run: the loop's hooks and the policy-loss terms.

The language policy kind's registry entry (``robopt.policies.POLICIES["language"]``) names ``on_policy_variant`` and
the ``group`` config section it reads; the on-policy builder (``robopt.algorithms.kinds.on_policy``) asks the entry
of the run's policy kind for them, so a robot run gets neither. The hooks are group sampling (``group.enabled``:
GRPO's group-relative advantages, DAPO's dynamic sampling and refill) or the task counters alone
(``robopt.llm.group_sampling``); the loss terms are the reference-KL penalty and the token metrics
(``robopt.llm.objective.token_terms``), for an update that adds policy-loss terms (PPO's).
"""

from __future__ import annotations

from collections.abc import Callable

from robopt.llm.group_sampling import TaskCounters, hooks_for
from robopt.llm.objective import token_terms
from robopt.options import ConfigError

__all__ = ["on_policy_variant"]


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
