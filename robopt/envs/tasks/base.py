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


class ContextTask(Task, Protocol):
    """A task with per-env state of its own (commands, last action, air time, observation history): the hooks
    ``robopt.envs.native_env.NativeVecEnv`` calls, in this order within a step: physics, ``update_context``,
    ``reward`` (pure: reads the context), ``advance``, ``observe``; and for rows that reset:
    ``reset_state``, the simulator set, ``reset_context``, ``observe``. ``robopt.envs.robot.task.TermTask`` is one.
    """

    privileged_dim: int  # P of ``privileged`` (0: none)

    def seed_steps(self, generator: torch.Generator) -> None:
        """Seed the task's per-step generator (noise, command resampling) from one draw of the env's generator."""
        ...

    def update_context(self, state: dict[str, torch.Tensor], action: torch.Tensor) -> None:
        """After the physics step, before the reward: the policy's action [N, A], contacts, timers."""
        ...

    def advance(self, state: dict[str, torch.Tensor]) -> None:
        """After the reward, before the observation: new commands for rows whose interval ran out, the new
        observation frame."""
        ...

    def reset_context(self, rows: torch.Tensor, state: dict[str, torch.Tensor], generator: torch.Generator) -> None:
        """Rows [M] (on the physics device) start new episodes, their simulator state already set."""
        ...

    def privileged(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The critic's extra observation [N, P] (foot contacts, friction...)."""
        ...

    def log(self) -> dict[str, torch.Tensor]:
        """Scalar statistics of the last step (0-dim tensors, no host sync), logged as ``env/<name>``."""
        ...

    def state_dict(self) -> dict:
        """The context, for an exact resume."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict``'s output."""
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
