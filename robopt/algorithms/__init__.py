"""Algorithms: an explicit table from ``algo.name`` to an ``AlgorithmSpec`` (config dataclass, builder, kind).

Every spec builds a loop the same way (``robopt.algorithms.kinds``); the composition root ``robopt.experiment``
turns ``ALGO_CONFIGS`` into the ``algo`` config section and ``RolloutConfig`` into ``rollout``. Nothing here
registers itself anywhere.
"""

from __future__ import annotations

from robopt.algorithms.bc import BCConfig, BehaviorCloningLoop
from robopt.algorithms.distill import DistillConfig, DistillLoop
from robopt.algorithms.dppo import DPPO, DPPOConfig
from robopt.algorithms.expo import EXPOConfig, build_expo_loop
from robopt.algorithms.fpo import FPOConfig, build_fpo
from robopt.algorithms.fql import FQLConfig, build_fql_loop
from robopt.algorithms.iql import IQLConfig, build_iql_loop
from robopt.algorithms.kinds import AlgorithmSpec, on_policy, own_loop
from robopt.algorithms.ogpo import OGPOConfig, build_ogpo_loop
from robopt.algorithms.onpolicy import RolloutConfig
from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.algorithms.qgf import QGFConfig, build_qgf_loop
from robopt.algorithms.sac import SACConfig, build_sac_loop
from robopt.algorithms.td3 import DDPGConfig, TD3Config, build_td3_loop
from robopt.algorithms.trpo import TRPO, TRPOConfig

__all__ = ["ALGORITHMS", "ALGO_CONFIGS", "AlgorithmSpec", "RolloutConfig"]

ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ppo": AlgorithmSpec(PPOConfig, on_policy(PPO), "on_policy", "PPO with a ratio-controlled surrogate", True),
    "trpo": AlgorithmSpec(TRPOConfig, on_policy(TRPO), "on_policy", "TRPO: natural gradient under a KL bound", True),
    "fpo": AlgorithmSpec(FPOConfig, on_policy(build_fpo), "on_policy", "FPO: PPO with a flow policy's CFM ratio"),
    "dppo": AlgorithmSpec(DPPOConfig, on_policy(DPPO), "on_policy", "DPPO: PPO over a diffusion chain's steps"),
    "bc": AlgorithmSpec(BCConfig, own_loop(BehaviorCloningLoop), "pretrain", "behaviour cloning from a dataset"),
    "distill": AlgorithmSpec(DistillConfig, own_loop(DistillLoop), "pretrain", "a student imitates a teacher run"),
    "sac": AlgorithmSpec(SACConfig, own_loop(build_sac_loop), "off_policy", "SAC: twin Q, auto temperature"),
    "td3": AlgorithmSpec(TD3Config, own_loop(build_td3_loop), "off_policy", "TD3: clipped double-Q, delays"),
    "ddpg": AlgorithmSpec(DDPGConfig, own_loop(build_td3_loop), "off_policy", "DDPG: TD3 with one critic"),
    "iql": AlgorithmSpec(IQLConfig, own_loop(build_iql_loop), "off_policy", "IQL: expectile V, weighted cloning"),
    "fql": AlgorithmSpec(FQLConfig, own_loop(build_fql_loop), "off_policy", "FQL: one-step flow policy on Q"),
    "qgf": AlgorithmSpec(QGFConfig, own_loop(build_qgf_loop), "off_policy", "Q-guided flow sampling, TD critics"),
    "expo": AlgorithmSpec(EXPOConfig, own_loop(build_expo_loop), "off_policy", "EXPO: flow base, Q-trained edits"),
    "ogpo": AlgorithmSpec(OGPOConfig, own_loop(build_ogpo_loop), "off_policy", "OGPO: clipped chain, Q reward"),
}
ALGO_CONFIGS: dict[str, type] = {name: spec.config_cls for name, spec in ALGORITHMS.items()}  # the algo choices
