"""Policies (Gaussian, flow, diffusion, language) and critics, with an explicit registry of policy kinds.

``POLICIES`` maps ``policy.name`` to a ``PolicySpec``: the kind's config dataclass (``POLICY_CONFIGS``, the
choices of the ``policy`` config section, so ``policy.name: flow`` reads the flow fields) and
``build(policy_config, env) -> policy``. The composition root ``robopt.experiment`` makes the ``policy`` and
``critic`` (``CriticConfig``) sections from them; nothing here registers itself. A kind whose on-policy runs differ
from the generic one names its variant (``on_policy``: the loop's hooks and the policy-loss terms) and the config
sections only that variant reads (``sections``): the language kind's group sampling, ``group``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.llm.policy import LanguagePolicyConfig, build_language_policy
from robopt.llm.variant import on_policy_variant
from robopt.policies.critics import CriticConfig, ValueCritic
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig, build_diffusion_policy
from robopt.policies.flow import FlowPolicy, FlowPolicyConfig, build_flow_policy
from robopt.policies.gaussian import GaussianPolicy, GaussianPolicyConfig
from robopt.policies.recurrent import RecurrentGaussianPolicy


@dataclass(frozen=True)
class PolicySpec:
    """A policy kind: its config dataclass, ``build(policy_config, env) -> policy``, a one-line summary; and, for a
    kind with an on-policy variant, ``on_policy(config, env, adds_loss_terms) -> (loop hooks, policy-loss terms or
    None)`` and the config sections only that variant reads (another kind's run refuses them when set)."""

    config_cls: type
    build: Callable
    summary: str
    on_policy: Callable | None = None
    sections: tuple[str, ...] = ()


def build_gaussian_policy(p: GaussianPolicyConfig, env) -> GaussianPolicy | RecurrentGaussianPolicy:
    if p.recurrent.enabled:
        return RecurrentGaussianPolicy(env.obs_dim, env.action_dim, env.action_low, env.action_high, p)
    return GaussianPolicy(
        env.obs_dim,
        env.action_dim,
        env.action_low,
        env.action_high,
        hidden=p.hidden,
        activation=p.activation,
        log_std_init=p.log_std_init,
        squash=p.squash,
        normalize_obs=p.normalize_obs,
        orthogonal_init=p.orthogonal_init,
        state_dependent_std=p.state_dependent_std,
    )


POLICIES: dict[str, PolicySpec] = {
    "gaussian": PolicySpec(GaussianPolicyConfig, build_gaussian_policy, "diagonal Gaussian (optionally squashed)"),
    "flow": PolicySpec(FlowPolicyConfig, build_flow_policy, "flow matching, integrated from noise"),
    "language": PolicySpec(
        LanguagePolicyConfig,
        build_language_policy,
        "causal language model",
        on_policy=on_policy_variant,
        sections=("group",),
    ),
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
