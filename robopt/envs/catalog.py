"""The tables of env ids (native and torch-native tasks) that task modules register into.

The lowest layer of the env registry: it imports no task. ``robopt.envs.registry`` imports the task modules
(which fill these tables when imported) and resolves ids and backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.core.protocols import VecEnv

BACKENDS = ("auto", "gymnasium", "isaaclab", "mujoco", "mujoco_warp", "torch")


@dataclass(frozen=True)
class NativeTask:
    """A native task: its Gymnasium twin (or None) and a factory per backend (``factory(num_envs, device, **kw)``)."""

    name: str
    gymnasium_id: str | None
    factories: dict[str, Callable[..., VecEnv]]


NATIVE_TASKS: dict[str, NativeTask] = {}
TORCH_TASKS: dict[str, Callable[..., VecEnv]] = {}
"""``robopt/<Name>`` -> ``factory(num_envs, device, **kw)``; filled by the torch-native task modules."""


def register_native_task(task: NativeTask) -> None:
    """Add a native task under ``mujoco/<name>``."""
    NATIVE_TASKS[f"mujoco/{task.name}"] = task


def register_torch_task(name: str, factory: Callable[..., VecEnv]) -> None:
    """Add a torch-native task under ``robopt/<name>``."""
    TORCH_TASKS[f"robopt/{name}"] = factory
