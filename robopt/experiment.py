"""The composition root: the one table of the features a run, the runner and the CLI know (DESIGN.md section 9).

``robopt.config`` is the core that knows no feature; the features (algorithms, policies, the fleet, the robot and
its task) define their config dataclasses and builders and register nothing themselves. This module names them
all: the config sections (``SECTIONS``, installed into ``robopt.config`` when this module is imported, the one
wiring step), the algorithms, the policy kinds, the loop kinds and the env backends (``FEATURES``). The CLI, a
test's conftest and a script that loads configs import it once; the library below it reads the installed sections
through ``robopt.config``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from robopt.algorithms import ALGO_CONFIGS, ALGORITHMS, AlgorithmSpec, RolloutConfig
from robopt.build import ALGORITHM_KINDS, build_algorithm_loop
from robopt.config import ExperimentConfig, Section, load_config, load_run_config, use_sections
from robopt.envs import BACKENDS
from robopt.envs.robot.config import RobotConfig, TaskConfig, robot_env_options
from robopt.fleet.build import build_fleet_loop
from robopt.fleet.config import FleetConfig, fleet_kind
from robopt.llm.group_sampling import GroupConfig
from robopt.policies import POLICIES, CriticConfig, PolicySpec

__all__ = ["FEATURES", "SECTIONS", "ExperimentConfig", "Features", "load_config", "load_run_config"]

# run kind -> build(config, initialize) -> loop (each loop has iteration(progress) -> metrics)
LOOP_KINDS: dict[str, Callable] = {**dict.fromkeys(ALGORITHM_KINDS, build_algorithm_loop), "fleet": build_fleet_loop}

SECTIONS: tuple[Section, ...] = (
    Section("algo", "algorithm section; algo.name picks the algorithm", choices=ALGO_CONFIGS, default="ppo",
            noun="algorithm"),
    Section("rollout", "on-policy rollout and advantage estimation", config_cls=RolloutConfig),
    Section("policy", "policy section; policy.name picks the kind (gaussian, flow, diffusion, language)",
            choices={name: spec.config_cls for name, spec in POLICIES.items()}, default="gaussian", noun="policy"),
    Section("critic", "value critic", config_cls=CriticConfig),
    Section("group", "language runs: group-relative advantages (GRPO, RLOO, Dr. GRPO), DAPO's dynamic sampling",
            config_cls=GroupConfig),
    Section("robot", "a robot from its description (env.id: robot)", config_cls=RobotConfig,
            env_options=robot_env_options),
    Section("task", "a task from terms for the robot (env.id: robot)", config_cls=TaskConfig),
    Section("fleet", "fleet: robots on Ray feeding one SAC/TD3 learner (num_robots > 0)", config_cls=FleetConfig,
            runs_as=fleet_kind, loop=LOOP_KINDS["fleet"]),
)  # fmt: skip


@dataclass(frozen=True)
class Features:
    """What a run can be made of: config sections, algorithms, policy kinds, loop kinds and env backends."""

    sections: tuple[Section, ...]
    algorithms: Mapping[str, AlgorithmSpec]
    policies: Mapping[str, PolicySpec]
    loop_kinds: Mapping[str, Callable]
    env_backends: tuple[str, ...]


FEATURES = Features(SECTIONS, ALGORITHMS, POLICIES, LOOP_KINDS, BACKENDS)

use_sections(FEATURES.sections)
