"""The whole experiment config: importing this module registers every feature's section and loop kind.

``robopt.config`` is the core that knows no feature; the features register their own sections (``algo`` and
``rollout`` by ``robopt.algorithms``, ``policy`` and ``critic`` by ``robopt.policies``, ``fleet`` by
``robopt.fleet.config``) and loop kinds (``robopt.build``, ``robopt.fleet.build``). This is the one module that
names them all: the CLI, the runner and the evaluation import it, and so does a script that loads configs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

import robopt.algorithms  # noqa: F401  (sections algo, rollout)
import robopt.build  # noqa: F401  (loop kinds on_policy, off_policy, pretrain)
import robopt.envs.robot.config  # noqa: F401  (sections robot, task)
import robopt.fleet.build  # noqa: F401  (loop kind fleet)
import robopt.fleet.config  # noqa: F401  (section fleet)
import robopt.policies  # noqa: F401  (sections policy, critic)
from robopt.config import ConfigError, ExperimentConfig, build_dataclass, load_config

__all__ = ["ExperimentConfig", "load_config", "load_run_config"]


def load_run_config(run_dir: Path) -> ExperimentConfig:
    """The resolved config saved in a run directory (``config.yaml``); a missing one is a one-line ConfigError."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    return build_dataclass(ExperimentConfig, yaml.safe_load(path.read_text()))
