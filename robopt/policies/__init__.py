"""Policies (Gaussian, flow, diffusion, language) and critics, with an explicit registry of policy kinds.

``POLICIES`` maps ``policy.name`` to a ``PolicySpec``: the kind's config dataclass (registered with
``robopt.config`` so ``policy.name: flow`` reads the flow fields) and ``build(policy_config, env) -> policy``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.config import PolicyConfig, register_policy_config
from robopt.llm.policy import LanguagePolicyConfig, build_language_policy
from robopt.policies.critics import ValueCritic
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig, build_diffusion_policy
from robopt.policies.flow import FlowPolicy, FlowPolicyConfig, build_flow_policy
from robopt.policies.gaussian import GaussianPolicy


@dataclass(frozen=True)
class PolicySpec:
    config_cls: type
    build: Callable
    summary: str


def build_gaussian_policy(p: PolicyConfig, env) -> GaussianPolicy:
    return GaussianPolicy(
        env.obs_dim, env.action_dim, env.action_low, env.action_high, hidden=p.hidden, activation=p.activation,
        log_std_init=p.log_std_init, squash=p.squash, normalize_obs=p.normalize_obs, orthogonal_init=p.orthogonal_init,
        state_dependent_std=p.state_dependent_std,
    )  # fmt: skip


POLICIES: dict[str, PolicySpec] = {}


def register_policy(name: str, spec: PolicySpec) -> None:
    POLICIES[name] = spec
    register_policy_config(name, spec.config_cls)


register_policy("gaussian", PolicySpec(PolicyConfig, build_gaussian_policy, "diagonal Gaussian (optionally squashed)"))
register_policy("flow", PolicySpec(FlowPolicyConfig, build_flow_policy, "flow matching, integrated from noise"))
register_policy("language", PolicySpec(LanguagePolicyConfig, build_language_policy, "causal language model"))
register_policy(
    "diffusion", PolicySpec(DiffusionPolicyConfig, build_diffusion_policy, "DDPM denoising chain (DPPO-ready)")
)

__all__ = [
    "POLICIES",
    "DiffusionPolicy",
    "FlowPolicy",
    "GaussianPolicy",
    "PolicySpec",
    "ValueCritic",
    "register_policy",
]
