"""Algorithms: an explicit registry from ``algo.name`` to (config dataclass, builder), and the loop kinds.

Registers the config sections ``algo`` (``algo.name`` picks the dataclass from ``ALGO_CONFIGS``) and
``rollout`` (the on-policy loop's collection and advantages). ``LOOP_KINDS`` maps a run's kind (an algorithm's
``kind``, or the kind a section claims, as the fleet does) to ``build(config, initialize) -> loop``; the kinds'
builders register themselves (``robopt.build`` for on_policy, off_policy and pretrain; ``robopt.fleet``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.algorithms.onpolicy import RolloutConfig
from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.config import Section, register_section


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
ALGO_CONFIGS: dict[str, type] = {}  # algo.name -> config dataclass (the ``algo`` section's choices)
LOOP_KINDS: dict[str, Callable] = {}  # run kind -> build(config, initialize) -> loop


def register_algorithm(name: str, spec: AlgorithmSpec) -> None:
    ALGORITHMS[name] = spec
    ALGO_CONFIGS[name] = spec.config_cls


def register_loop_kind(kind: str, build: Callable) -> None:
    """``build(config, initialize) -> loop`` for runs of ``kind`` (each loop has ``iteration() -> metrics``)."""
    LOOP_KINDS[kind] = build


register_section(Section("algo", "algorithm section; algo.name picks the algorithm", choices=ALGO_CONFIGS,
                         default="ppo", noun="algorithm"))  # fmt: skip
register_section(Section("rollout", "on-policy rollout and advantage estimation", config_cls=RolloutConfig))


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

from robopt.algorithms.iql import IQLConfig, build_iql_loop  # noqa: E402

register_algorithm("iql", AlgorithmSpec(IQLConfig, build_iql_loop, "off_policy", "IQL: expectile V, weighted cloning"))

from robopt.algorithms.fql import FQLConfig, build_fql_loop  # noqa: E402

register_algorithm("fql", AlgorithmSpec(FQLConfig, build_fql_loop, "off_policy", "FQL: one-step flow policy on Q"))

from robopt.algorithms.qgf import QGFConfig, build_qgf_loop  # noqa: E402

register_algorithm("qgf", AlgorithmSpec(QGFConfig, build_qgf_loop, "off_policy", "Q-guided flow sampling, TD critics"))

from robopt.algorithms.expo import EXPOConfig, build_expo_loop  # noqa: E402

register_algorithm("expo", AlgorithmSpec(EXPOConfig, build_expo_loop, "off_policy", "EXPO: flow base, Q-trained edits"))

from robopt.algorithms.ogpo import OGPOConfig, build_ogpo_loop  # noqa: E402

register_algorithm("ogpo", AlgorithmSpec(OGPOConfig, build_ogpo_loop, "off_policy", "OGPO: clipped chain, Q reward"))
