"""What a native task is: batched torch functions over a physics backend's state.

Shapes: N envs, M rows being reset, D obs dim, A action dim, P tracked-position dim, Q = nq, V = nv.

A task never touches MuJoCo objects. It reads the state dict of ``robopt.envs.physics.PhysicsBackend``
(float64 on the CPU backend, float32 on MuJoCo Warp) and computes in that dtype. Reset noise is drawn on
CPU in float64 from the env's ``torch.Generator``, so a seed gives the same episodes on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import mujoco
import torch

Expert = Callable[[torch.Tensor], torch.Tensor]
"""A scripted expert: ``act(obs [N, D]) -> action [N, A]`` (``robopt.envs.experts``)."""


class Task(Protocol):
    """A Gymnasium-v5-compatible task definition; built from the host MjModel and keyword options."""

    name: str  # registered as ``mujoco/<name>``
    gymnasium_id: str  # the Gymnasium twin, e.g. ``HalfCheetah-v5``
    frame_skip: int  # MuJoCo substeps per env step
    max_episode_steps: int  # time limit: ``truncated`` once an episode reaches it
    fields: tuple[str, ...]  # backend state fields the task reads

    def observe(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """Observation [N, D] in the state's dtype."""
        ...

    def tracked_position(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """Position [N, P] whose change over a step defines the velocity reward (P = 0 if none)."""
        ...

    def reward(
        self, state: dict[str, torch.Tensor], action: torch.Tensor, position_before: torch.Tensor, dt: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns reward [N] and terminated [N] bool after a step with action [N, A]."""
        ...

    def reset_state(self, num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Reset distribution: qpos [M, Q], qvel [M, V] float64 on CPU."""
        ...


def init_state(model: mujoco.MjModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Gymnasium's ``init_qpos`` (the model's qpos0) and ``init_qvel`` (zeros), float64 CPU."""
    return torch.tensor(model.qpos0, dtype=torch.float64), torch.zeros(model.nv, dtype=torch.float64)


def uniform(generator: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    """U(low, high) float64 samples of ``shape`` on CPU."""
    return low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)


def normal(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard normal float64 samples of ``shape`` on CPU."""
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def control_cost(action: torch.Tensor, weight: float) -> torch.Tensor:
    """weight * sum(action^2) per row: action [N, A] -> [N]."""
    return weight * action.square().sum(dim=-1)


def body_id(model: mujoco.MjModel, name: str) -> int:
    """Index of a named body, with a readable error."""
    index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
    if index < 0:
        raise ValueError(f"body {name!r} not found in model")
    return index


def no_position(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """Empty tracked position [N, 0] for tasks without a velocity reward."""
    qpos = state["qpos"]
    return qpos.new_zeros(qpos.shape[0], 0)


def rejection_sample(num: int, sample: Callable, accept: Callable) -> torch.Tensor:
    """Batched rejection sampling: redraw rows of ``sample(k) -> [k, C]`` until ``accept([k, C]) -> [k]`` holds."""
    result = sample(num)
    pending = ~accept(result)
    while pending.any():
        rows = pending.nonzero()[:, 0]
        candidate = sample(rows.numel())
        result[rows] = candidate
        pending[rows] = ~accept(candidate)
    return result
