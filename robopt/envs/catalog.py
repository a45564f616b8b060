"""What a native task is (``NativeTask``) and the env backends: the lowest layer of the env registry.

It imports no task; ``robopt.envs.registry`` lists the tasks in its own tables and resolves ids and backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from robopt.core.protocols import VecEnv

BACKENDS = ("auto", "gymnasium", "isaaclab", "metaworld", "mujoco", "mujoco_warp", "torch")


@dataclass(frozen=True)
class NativeTask:
    """A native task: its Gymnasium twin (or None) and a factory per backend (``factory(num_envs, device, **kw)``)."""

    name: str
    gymnasium_id: str | None
    factories: dict[str, Callable[..., VecEnv]]
