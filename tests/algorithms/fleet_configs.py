"""The small fleet experiment the fleet tests share (test_fleet_config.py, test_fleet_ray.py)."""

from __future__ import annotations

from robopt.config import build_dataclass
from robopt.experiment import ExperimentConfig


def make_config(algo: str = "sac", env_kwargs: dict | None = None, **fleet) -> ExperimentConfig:
    fleet = {"num_robots": 2, "steps_per_robot": 180, "collect_steps": 30, "publish_interval": 4,
             "randomization": {"body_mass": [0.5, 1.5]}, **fleet}  # fmt: skip
    return build_dataclass(
        ExperimentConfig,
        {
            "seed": 3,
            "env": {"id": "mujoco/InvertedPendulum", "kwargs": env_kwargs or {"max_episode_steps": 20}},
            "policy": {
                "squash": True,
                "state_dependent_std": True,
                "hidden": [16, 16],
                "activation": "relu",
                "normalize_obs": False,
            },
            "algo": {"name": algo}
            if algo == "ppo"
            else {
                "name": algo,
                "critic_hidden": [16, 16],
                "loop": {"learning_starts": 40, "batch_size": 16, "buffer_size": 1000, "gradient_steps": 2},
            },
            "fleet": fleet,
        },
    )
