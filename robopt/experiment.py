"""The composition root: the one table of the features a run, the runner and the CLI know (DESIGN.md section 9).

``robopt.config`` is the core that knows no feature; the features (algorithms, policies, the fleet, the robot and
its task) define their config dataclasses and builders and register nothing themselves. This module names them
all: the config sections (``SECTIONS``), the algorithms, the policy kinds, the loop kinds and the env backends
(``FEATURES``). It is also the public way in for a config: ``ExperimentConfig`` (the run config whose class
carries ``SECTIONS``), ``load_config`` and ``load_run_config``. Nothing is installed anywhere when it is imported:
a config built here knows its own sections, so the library below (``robopt.build`` and the loops) works on it
whatever else a script imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from robopt.algorithms import ALGO_CONFIGS, ALGORITHMS, AlgorithmSpec, RolloutConfig
from robopt.build import ALGORITHM_KINDS, build_algorithm_loop
from robopt.config import Experiment, Section, check_sections, parse_config_file, parse_run_config
from robopt.envs import BACKENDS
from robopt.envs.robot.config import RobotConfig, TaskConfig, migrate_task, robot_env_options
from robopt.fleet.build import build_fleet_loop
from robopt.fleet.config import FleetConfig, fleet_kind
from robopt.llm.group_sampling import GroupConfig, migrate_group
from robopt.policies import POLICIES, CriticConfig, PolicySpec

__all__ = ["FEATURES", "SECTIONS", "ExperimentConfig", "Features", "load_config", "load_run_config"]

# run kind -> build(config, initialize) -> loop (each loop has iteration(progress) -> metrics)
LOOP_KINDS: dict[str, Callable] = {**dict.fromkeys(ALGORITHM_KINDS, build_algorithm_loop), "fleet": build_fleet_loop}

SECTIONS: tuple[Section, ...] = check_sections((
    Section("algo", "algorithm section; algo.name picks the algorithm", choices=ALGO_CONFIGS, default="ppo",
            noun="algorithm"),
    Section("rollout", "on-policy rollout and advantage estimation", config_cls=RolloutConfig),
    Section("policy", "policy section; policy.name picks the kind (gaussian, flow, diffusion, language)",
            choices={name: spec.config_cls for name, spec in POLICIES.items()}, default="gaussian", noun="policy"),
    Section("critic", "value critic", config_cls=CriticConfig),
    Section("group", "language runs: group-relative advantages (GRPO, RLOO, Dr. GRPO), DAPO's dynamic sampling",
            config_cls=GroupConfig, migrate=migrate_group),
    Section("robot", "a robot from its description (env.id: robot)", config_cls=RobotConfig,
            env_options=robot_env_options),
    Section("task", "a task from terms for the robot (env.id: robot)", config_cls=TaskConfig, migrate=migrate_task),
    Section("fleet", "fleet: robots on Ray feeding one SAC/TD3 learner (num_robots > 0)", config_cls=FleetConfig,
            runs_as=fleet_kind, loop=LOOP_KINDS["fleet"]),
))  # fmt: skip


@dataclass(frozen=True)
class Features:
    """What a run can be made of: config sections, algorithms, policy kinds, loop kinds and env backends."""

    sections: tuple[Section, ...]
    algorithms: Mapping[str, AlgorithmSpec]
    policies: Mapping[str, PolicySpec]
    loop_kinds: Mapping[str, Callable]
    env_backends: tuple[str, ...]


FEATURES = Features(SECTIONS, ALGORITHMS, POLICIES, LOOP_KINDS, BACKENDS)


@dataclass(frozen=True)
class ExperimentConfig(Experiment):
    """A robopt run's config: the fields every run has (``robopt.config.Experiment``) and the sections of
    ``SECTIONS`` (``config.algo``, ``config.policy``...)."""

    __sections__: ClassVar[tuple[Section, ...]] = SECTIONS


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment file (and the files it ``extends``), apply ``a.b=value`` overrides and validate.

    ``extends: other.yaml`` (a path relative to the file) starts from that file's settings: mappings merge key by
    key, anything else is replaced, and a section whose ``name`` differs from the base's (another algorithm or
    policy kind) replaces the base's section whole, while a base section without a name (``algo: {loop: ...}``,
    shared by several algorithms) merges into any. The run's name is the file's own ``name`` or its file name.
    """
    return parse_config_file(ExperimentConfig, path, overrides)


def load_run_config(run_dir: str | Path) -> ExperimentConfig:
    """The resolved config saved in a run directory (``config.yaml``); a missing one is a one-line ConfigError."""
    return parse_run_config(ExperimentConfig, run_dir)
