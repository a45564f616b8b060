"""Native batched MuJoCo tasks matching Gymnasium v5, listed as ``mujoco/<Task>`` by ``native_tasks()``.

Also the goal-conditioned ``GripperReach`` and ``GripperPush`` (``robopt.envs.tasks.goal``: own MJCF, no
Gymnasium twin).

Backends: ``mujoco`` (CPU threads, always present) and ``mujoco_warp`` (listed when the optional
``[gpu]`` extra is installed; warp itself is imported only when such an env is built).
"""

from __future__ import annotations

import importlib.util
from functools import partial

from robopt.envs.catalog import NativeTask
from robopt.envs.tasks.control import InvertedDoublePendulum, InvertedPendulum, Pusher, Reacher
from robopt.envs.tasks.goal import GripperPush, GripperReach
from robopt.envs.tasks.locomotion import Ant, HalfCheetah, Hopper, Humanoid, Walker2d

TASKS = (HalfCheetah, Hopper, Walker2d, Ant, Humanoid, InvertedPendulum, InvertedDoublePendulum, Reacher, Pusher)
GOAL_TASKS = (GripperReach, GripperPush)  # no Gymnasium twin: kept out of TASKS (parity tests, benchmarks)


def _factory(task_cls: type, backend: str, num_envs: int, device="cpu", **kwargs):
    from robopt.envs.native_env import make_native_env  # lazy: native_env imports this package's modules

    return make_native_env(task_cls, backend, num_envs, device=device, **kwargs)


def native_tasks() -> dict[str, NativeTask]:
    """``mujoco/<name>`` -> ``NativeTask`` for every task here, with a factory per backend installed."""
    backends = ["mujoco"]
    if importlib.util.find_spec("mujoco_warp") is not None:
        backends.append("mujoco_warp")
    tasks = {}
    for task_cls in (*TASKS, *GOAL_TASKS):
        factories = {backend: partial(_factory, task_cls, backend) for backend in backends}
        tasks[f"mujoco/{task_cls.name}"] = NativeTask(task_cls.name, task_cls.gymnasium_id, factories=factories)
    return tasks


__all__ = ["TASKS", "Ant", "HalfCheetah", "Hopper", "Humanoid", "InvertedDoublePendulum", "InvertedPendulum"]
__all__ += ["GOAL_TASKS", "GripperPush", "GripperReach", "Pusher", "Reacher", "Walker2d", "native_tasks"]
