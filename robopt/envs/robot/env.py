"""``make_robot_env``: the native batched env of ``env.id: robot`` from the ``robot`` and ``task`` sections."""

from __future__ import annotations

import torch

from robopt.config import build_dataclass
from robopt.envs.native_env import NativeVecEnv, make_physics, pop_backend_options
from robopt.envs.robot.builder import build_robot
from robopt.envs.robot.config import ROBOT_ENV_ID, RobotConfig, TaskConfig, parse_task_terms
from robopt.envs.robot.model import RobotModel
from robopt.envs.robot.task import TermTask
from robopt.envs.robot.terms import contact_groups

ENV_OPTIONS = ("seed", "randomization", "max_episode_steps")


def build_robot_model(robot: RobotConfig, task: TaskConfig) -> RobotModel:
    """The robot compiled with the sensors its task's terms declare they need (contacts on named bodies), and the
    task's scene (table, objects) and terrain."""
    return build_robot(robot, contact_groups(parse_task_terms(task)), task.scene, task.terrain)


def make_robot_env(
    num_envs: int,
    backend: str = "mujoco",
    device: str | torch.device = "cpu",
    robot: RobotConfig | dict | None = None,
    task: TaskConfig | dict | None = None,
    **kwargs,
) -> NativeVecEnv:
    """N copies of the robot running the task on ``backend`` ('mujoco' or 'mujoco_warp').

    ``robot`` and ``task`` are the config sections (dataclasses, or mappings checked like a config file's). Keyword
    options: ``seed``, ``randomization`` (``robopt.envs.randomization``), ``max_episode_steps`` (default
    ``task.episode_s`` over the control period), and the backend's own (``num_threads``; ``nconmax``, ``graph``...).
    """
    robot = robot if isinstance(robot, RobotConfig) else build_dataclass(RobotConfig, robot, "robot.")
    task = task if isinstance(task, TaskConfig) else build_dataclass(TaskConfig, task, "task.")
    options = {key: kwargs.pop(key) for key in ENV_OPTIONS if key in kwargs}
    backend_options = pop_backend_options(ROBOT_ENV_ID, backend, kwargs)
    if kwargs:
        allowed = ", ".join((*ENV_OPTIONS, *backend_options))
        raise ValueError(f"unknown env.kwargs {', '.join(sorted(kwargs))} for a robot env; allowed: {allowed}")
    model = build_robot_model(robot, task)
    physics_device = torch.device("cpu") if backend == "mujoco" else torch.device(device)
    dtype = torch.float64 if backend == "mujoco" else torch.float32
    term_task = TermTask(model, task, num_envs, physics_device, dtype)
    physics = make_physics(model.model, backend, num_envs, term_task.fields, device, backend_options, ROBOT_ENV_ID)
    try:
        term_task.bind(physics.state())
        return NativeVecEnv(term_task, physics, ROBOT_ENV_ID, device=device, **options)
    except BaseException:
        physics.close()
        raise
