"""Algorithms: an explicit registry from ``algo.name`` to (config dataclass, builder)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.config import register_algo_config


@dataclass(frozen=True)
class AlgorithmSpec:
    """How the runner builds an algorithm; ``kind`` picks the loop (DESIGN.md section 7).

    ``on_policy``: ``build(algo_config, policy, critic) -> OnPolicyAlgorithm`` plugged into ``OnPolicyLoop``.
    ``pretrain``, ``off_policy``: ``build(algo_config, env, policy, seed, env_id) -> loop`` (the loop itself:
    behaviour cloning, or the off-policy loop with its replay buffer).
    """

    config_cls: type
    build: Callable
    kind: str
    summary: str


ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register_algorithm(name: str, spec: AlgorithmSpec) -> None:
    ALGORITHMS[name] = spec
    register_algo_config(name, spec.config_cls)


register_algorithm("ppo", AlgorithmSpec(PPOConfig, PPO, "on_policy", "PPO with a ratio-controlled surrogate"))

from robopt.algorithms.trpo import TRPO, TRPOConfig  # noqa: E402  (after the registry it registers into)

register_algorithm("trpo", AlgorithmSpec(TRPOConfig, TRPO, "on_policy", "TRPO: natural gradient under a KL bound"))

from robopt.algorithms.fpo import FPOConfig, build_fpo  # noqa: E402

register_algorithm("fpo", AlgorithmSpec(FPOConfig, build_fpo, "on_policy", "FPO: PPO with a flow policy's CFM ratio"))

from robopt.algorithms.dppo import DPPO, DPPOConfig  # noqa: E402

register_algorithm("dppo", AlgorithmSpec(DPPOConfig, DPPO, "on_policy", "DPPO: PPO over a diffusion chain's steps"))

from robopt.algorithms.bc import BCConfig, BehaviorCloningLoop  # noqa: E402

register_algorithm("bc", AlgorithmSpec(BCConfig, BehaviorCloningLoop, "pretrain", "behaviour cloning from a dataset"))

from robopt.algorithms.sac import SACConfig, build_sac_loop  # noqa: E402

register_algorithm("sac", AlgorithmSpec(SACConfig, build_sac_loop, "off_policy", "SAC: twin Q, auto temperature"))

from robopt.algorithms.td3 import DDPGConfig, TD3Config, build_td3_loop  # noqa: E402

register_algorithm("td3", AlgorithmSpec(TD3Config, build_td3_loop, "off_policy", "TD3: clipped double-Q, delays"))
register_algorithm("ddpg", AlgorithmSpec(DDPGConfig, build_td3_loop, "off_policy", "DDPG: TD3 with one critic"))
