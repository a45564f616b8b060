"""Policies (Gaussian, flow, diffusion, language) and critics, with an explicit registry of policy kinds.

``POLICIES`` maps ``policy.name`` to a ``PolicySpec``: the kind's config dataclass (``POLICY_CONFIGS``, the
choices of the ``policy`` config section, so ``policy.name: flow`` reads the flow fields) and
``build(policy_config, env) -> policy``. The composition root ``robopt.experiment`` makes the ``policy`` and
``critic`` (``CriticConfig``) sections from them; nothing here registers itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.llm.policy import LanguagePolicyConfig, build_language_policy
from robopt.policies.critics import CriticConfig, ValueCritic
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig, build_diffusion_policy
from robopt.policies.flow import FlowPolicy, FlowPolicyConfig, build_flow_policy
from robopt.policies.gaussian import GaussianPolicy, GaussianPolicyConfig
from robopt.policies.recurrent import RecurrentGaussianPolicy


@dataclass(frozen=True)
class PolicySpec:
    config_cls: type
    build: Callable
    summary: str


def build_gaussian_policy(p: GaussianPolicyConfig, env) -> GaussianPolicy | RecurrentGaussianPolicy:
    if p.recurrent.enabled:
        return RecurrentGaussianPolicy(env.obs_dim, env.action_dim, env.action_low, env.action_high, p)
    return GaussianPolicy(
        env.obs_dim, env.action_dim, env.action_low, env.action_high, hidden=p.hidden, activation=p.activation,
        log_std_init=p.log_std_init, squash=p.squash, normalize_obs=p.normalize_obs, orthogonal_init=p.orthogonal_init,
        state_dependent_std=p.state_dependent_std,
    )  # fmt: skip


POLICIES: dict[str, PolicySpec] = {
    "gaussian": PolicySpec(GaussianPolicyConfig, build_gaussian_policy, "diagonal Gaussian (optionally squashed)"),
    "flow": PolicySpec(FlowPolicyConfig, build_flow_policy, "flow matching, integrated from noise"),
    "language": PolicySpec(LanguagePolicyConfig, build_language_policy, "causal language model"),
    "diffusion": PolicySpec(DiffusionPolicyConfig, build_diffusion_policy, "DDPM denoising chain (DPPO-ready)"),
}
POLICY_CONFIGS: dict[str, type] = {name: spec.config_cls for name, spec in POLICIES.items()}  # the policy choices

__all__ = [
    "POLICIES",
    "DiffusionPolicy",
    "FlowPolicy",
    "GaussianPolicy",
    "CriticConfig",
    "GaussianPolicyConfig",
    "POLICY_CONFIGS",
    "PolicySpec",
    "ValueCritic",
]
