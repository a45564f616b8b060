"""Env ids and backends: one explicit registry, no import strings and no registration by the task modules: the
tables below name every native and torch-native task.

Ids:
    ``mujoco/<Task>``: a native batched task (robopt.envs.tasks); runs on backend ``mujoco`` (CPU threads),
        ``mujoco_warp`` (GPU) or ``gymnasium`` (the matching Gymnasium v5 env, for parity and comparison).
        A native task without a Gymnasium twin (``gymnasium_id=None``: the goal tasks) runs only on the native
        backends; ``auto`` never picks ``gymnasium`` for it.
    ``robopt/<Name>``: a torch-native batched task (``robopt.envs.multigoal``...); runs only on backend ``torch``.
    ``robot``: a robot from its description and a task from terms (the config's ``robot`` and ``task`` sections,
        passed as ``robot=`` and ``task=``; ``robopt.envs.robot``); runs on backend ``mujoco`` or ``mujoco_warp``.
    ``Isaac-<Task>``: an Isaac Lab task (``Isaac-Cartpole-Direct``...); runs only on backend ``isaaclab``, in the
        Isaac venv (``make isaac``; robopt.envs.isaaclab_env).
    ``metaworld/<task>-v3``: one of Meta-World's 50 tasks; runs only on backend ``metaworld``, in worker processes
        of the Meta-World venv (``make metaworld``; robopt.envs.metaworld_env).
    Any Gymnasium id (``HalfCheetah-v5``, ``Pendulum-v1``...): backend ``gymnasium``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robopt.core.protocols import VecEnv
from robopt.envs.catalog import BACKENDS, NativeTask
from robopt.envs.multigoal import make_multigoal
from robopt.envs.tasks import native_tasks
from robopt.llm.env import make_prompt_env

ROBOT_ENV_ID = "robot"  # robopt.envs.robot.config.ROBOT_ENV_ID
NATIVE_TASKS: dict[str, NativeTask] = native_tasks()  # mujoco/<Task> -> its factories per backend
TORCH_TASKS: dict[str, Callable[..., VecEnv]] = {  # robopt/<Name> -> factory(num_envs, device, **kw)
    "robopt/MultiGoal": make_multigoal,
    "robopt/Text": make_prompt_env,
}

__all__ = ["BACKENDS", "NATIVE_TASKS", "TORCH_TASKS", "NativeTask", "gymnasium_twin", "list_env_ids", "make_env"]
__all__ += ["resolve_backend"]


def list_env_ids() -> list[str]:
    """Registered native and torch-native ids (Gymnasium ids are open-ended and not listed)."""
    return sorted([*NATIVE_TASKS, *TORCH_TASKS])


def resolve_backend(env_id: str, backend: str, device: str | torch.device, num_envs: int, has_options: bool) -> str:
    """The backend ``make_env`` uses for these arguments (``auto`` resolved); a bad id or backend is a ValueError."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown env backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if env_id.startswith("robopt/"):
        return _torch_backend(env_id, backend)
    if env_id == ROBOT_ENV_ID:
        if backend == "auto":
            return "mujoco_warp" if torch.device(device).type == "cuda" else "mujoco"
        if backend not in ("mujoco", "mujoco_warp"):
            raise ValueError(f"env.id={ROBOT_ENV_ID} runs on backend mujoco or mujoco_warp, not {backend!r}")
        return backend
    if env_id.startswith("Isaac-"):
        if backend not in ("auto", "isaaclab"):
            raise ValueError(f"{env_id} is an Isaac Lab task; allowed backends: auto, isaaclab (not {backend!r})")
        return "isaaclab"
    if env_id.startswith("metaworld/"):
        if backend not in ("auto", "metaworld"):
            raise ValueError(f"{env_id} is a Meta-World task; allowed backends: auto, metaworld (not {backend!r})")
        return "metaworld"
    if backend == "metaworld":
        raise ValueError(f"backend 'metaworld' runs Meta-World task ids (metaworld/<task>-v3), not {env_id!r}")
    if backend == "isaaclab":
        raise ValueError(f"backend 'isaaclab' runs Isaac Lab task ids (Isaac-<Task>), not {env_id!r}")
    if not env_id.startswith("mujoco/"):
        return "gymnasium" if backend == "auto" else backend
    if env_id not in NATIVE_TASKS:
        allowed = ", ".join(sorted(NATIVE_TASKS)) or "(none registered)"
        raise ValueError(f"unknown native task {env_id!r}; allowed: {allowed}")
    task = NATIVE_TASKS[env_id]
    if backend == "auto":
        return _fastest_backend(task, torch.device(device), num_envs, has_options)
    if backend == "gymnasium" and task.gymnasium_id is None:
        allowed = ", ".join(["auto", *task.factories])
        raise ValueError(f"{env_id} has no Gymnasium twin, so backend 'gymnasium' is not available; allowed: {allowed}")
    return backend


def gymnasium_twin(env_id: str) -> str:
    """The Gymnasium id that a native ``mujoco/<Task>`` id reproduces; any other id unchanged.

    A torch-native ``robopt/<Name>`` id, or a native task without a twin (the goal tasks), is a ValueError.
    """
    if env_id.startswith("robopt/"):
        raise ValueError(f"{env_id} is a torch-native task with no Gymnasium twin; use backend 'torch'")
    if env_id == ROBOT_ENV_ID:
        raise ValueError("env.id=robot (a robot from its description) has no Gymnasium twin; use backend 'mujoco'")
    if not env_id.startswith("mujoco/"):
        return env_id
    if env_id not in NATIVE_TASKS:
        raise ValueError(f"unknown native task {env_id!r}; allowed: {', '.join(sorted(NATIVE_TASKS))}")
    twin = NATIVE_TASKS[env_id].gymnasium_id
    if twin is None:
        raise ValueError(f"{env_id} is a native task with no Gymnasium twin; use backend 'mujoco' or 'mujoco_warp'")
    return twin


def make_env(env_id: str, num_envs: int, backend: str = "auto", device: str | torch.device = "cpu", **kwargs) -> VecEnv:
    """Build a VecEnv. ``backend='auto'`` picks the fastest backend present for the id."""
    backend = resolve_backend(env_id, backend, device, num_envs, bool(kwargs))
    if env_id.startswith("robopt/"):
        return TORCH_TASKS[env_id](num_envs=num_envs, device=device, **kwargs)
    if env_id == ROBOT_ENV_ID:
        from robopt.envs.robot.env import make_robot_env  # MjSpec edits and terms: built only when asked for

        return make_robot_env(num_envs, backend=backend, device=device, **kwargs)
    if backend == "isaaclab":
        from robopt.envs.isaaclab_env import IsaacLabVecEnv

        return IsaacLabVecEnv(env_id, num_envs, device=device, **kwargs)
    if backend == "metaworld":
        from robopt.envs.metaworld_env import MetaWorldVecEnv

        return MetaWorldVecEnv(env_id, num_envs, device=device, **kwargs)
    if env_id.startswith("mujoco/"):
        task = NATIVE_TASKS[env_id]
        if backend == "gymnasium":
            from robopt.envs.gymnasium_env import GymnasiumVecEnv

            return GymnasiumVecEnv(task.gymnasium_id, num_envs, device=device, **kwargs)
        if backend not in task.factories:
            allowed = ", ".join(["gymnasium", *task.factories] if task.gymnasium_id else task.factories)
            raise ValueError(f"{env_id}: backend {backend!r} is not available; allowed: {allowed}")
        return task.factories[backend](num_envs=num_envs, device=device, **kwargs)
    if backend != "gymnasium":
        raise ValueError(f"env {env_id!r} is a Gymnasium id and runs only on backend 'gymnasium', not {backend!r}")
    from robopt.envs.gymnasium_env import GymnasiumVecEnv

    return GymnasiumVecEnv(env_id, num_envs, device=device, **kwargs)


def _torch_backend(env_id: str, backend: str) -> str:
    """``torch`` for a registered ``robopt/<Name>`` id asked for ``auto`` or ``torch``; anything else a ValueError."""
    if env_id not in TORCH_TASKS:
        raise ValueError(f"unknown torch-native task {env_id!r}; allowed: {', '.join(sorted(TORCH_TASKS))}")
    if backend not in ("auto", "torch"):
        raise ValueError(f"{env_id} is a torch-native task; allowed backends: auto, torch (not {backend!r})")
    return "torch"


# Below this many envs on CPU the native backend's fixed per-step torch work outweighs its batching
# (benchmarks/env_throughput.py: about 0.3x Gymnasium at N=1, break-even near N=16 for HalfCheetah).
NATIVE_MIN_ENVS_ON_CPU = 16


def _fastest_backend(task: NativeTask, device: torch.device, num_envs: int, has_options: bool) -> str:
    """Warp on CUDA; native threads on CPU from 16 envs, with native options (randomization...) or without a twin."""
    if device.type == "cuda" and "mujoco_warp" in task.factories:
        return "mujoco_warp"
    native_only = task.gymnasium_id is None
    if "mujoco" in task.factories and (num_envs >= NATIVE_MIN_ENVS_ON_CPU or has_options or native_only):
        return "mujoco"
    return "gymnasium"
