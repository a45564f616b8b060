"""Native batched MuJoCo tasks matching Gymnasium v5, registered as ``mujoco/<Task>``.

Also the goal-conditioned ``GripperReach`` and ``GripperPush`` (``robopt.envs.tasks.goal``: own MJCF, no
Gymnasium twin).

Backends: ``mujoco`` (CPU threads, always present) and ``mujoco_warp`` (registered when the optional
``[gpu]`` extra is installed; warp itself is imported only when such an env is built).
"""

from __future__ import annotations

import importlib.util
from functools import partial

from robopt.envs.catalog import NativeTask, register_native_task
from robopt.envs.tasks.control import InvertedDoublePendulum, InvertedPendulum, Pusher, Reacher
from robopt.envs.tasks.goal import GripperPush, GripperReach
from robopt.envs.tasks.locomotion import Ant, HalfCheetah, Hopper, Humanoid, Walker2d

TASKS = (HalfCheetah, Hopper, Walker2d, Ant, Humanoid, InvertedPendulum, InvertedDoublePendulum, Reacher, Pusher)
GOAL_TASKS = (GripperReach, GripperPush)  # no Gymnasium twin: kept out of TASKS (parity tests, benchmarks)


def _factory(task_cls: type, backend: str, num_envs: int, device="cpu", **kwargs):
    from robopt.envs.native_env import make_native_env  # lazy: native_env imports this package's modules

    return make_native_env(task_cls, backend, num_envs, device=device, **kwargs)


def _register_all() -> None:
    backends = ["mujoco"]
    if importlib.util.find_spec("mujoco_warp") is not None:
        backends.append("mujoco_warp")
    for task_cls in (*TASKS, *GOAL_TASKS):
        factories = {backend: partial(_factory, task_cls, backend) for backend in backends}
        register_native_task(NativeTask(task_cls.name, task_cls.gymnasium_id, factories=factories))


_register_all()

__all__ = ["TASKS", "Ant", "HalfCheetah", "Hopper", "Humanoid", "InvertedDoublePendulum", "InvertedPendulum"]
__all__ += ["GOAL_TASKS", "GripperPush", "GripperReach", "Pusher", "Reacher", "Walker2d"]
