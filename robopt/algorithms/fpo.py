"""Flow Policy Optimization (McAllister, Yi et al. 2025, "Flow Matching Policy Gradients") on the PPO update.

FPO is PPO's clipped surrogate with the flow policy's ratio r = exp(l_old - l_new) of conditional flow-matching
losses on the draws stored at act time (``robopt.policies.flow``); nothing else changes, so this module is a
config with FPO's defaults and a builder that checks the policy kind. Every ``algo.ratio`` control applies
(``kl_penalty_adaptive`` uses the k3 estimator on the log-ratio, the flow policy having no closed-form KL).

Defaults, read from the paper and its public MuJoCo Playground code: clip range 0.05 (the ratio of a flow
policy moves faster per step than a Gaussian's), learning rate 3e-4, 8 draws per action (a policy setting,
``policy.draws``), losses averaged over draws before the exponential (``policy.ratio_mode``).
"""

from __future__ import annotations

from dataclasses import dataclass

from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.core.ratio_control import RatioControl
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class FPORatioControl(RatioControl):
    """``RatioControl`` whose default clip range is FPO's 0.05."""

    clip_low: float = option(0.05, "clip, dual_clip: eps (FPO: 0.05); clip_asymmetric: eps_low")


@dataclass(frozen=True)
class FPOConfig(PPOConfig):
    learning_rate: float = option(3e-4, "Adam learning rate (initial value of the schedule)")
    ratio: FPORatioControl = option(FPORatioControl(), "ratio control of the surrogate (algo.ratio.name=...)")


def build_fpo(config: FPOConfig, policy, critic) -> PPO:
    """PPO's update over a flow policy; any other policy kind is refused with one line."""
    from robopt.policies.flow import FlowPolicy

    if not isinstance(policy, FlowPolicy):
        raise ConfigError(
            "algo.name=fpo needs policy.name=flow (its ratio comes from flow-matching losses), "
            f"got {type(policy).__name__}"
        )
    from robopt.policies.flow import refuse_one_step

    refuse_one_step(policy, "algo.name=fpo")
    return PPO(config, policy, critic)
