"""Scripted experts (demonstrations, sanity baselines), keyed by env id.

``robopt/MultiGoal`` here; ``mujoco/GripperReach`` and ``mujoco/GripperPush`` in ``robopt.envs.tasks.goal``.

Shapes: N envs, D obs dim, A action dim, K goals.

``EXPERTS[env_id](env, seed)`` returns ``act(obs [N, D]) -> action [N, A]`` (torch, on ``env.device``). An
expert may keep per-row state between calls (which goal a row is heading for); it must be called once per
step, on the observations the env returned, starting from those of ``env.reset``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robopt.envs.tasks.base import Expert
from robopt.envs.tasks.goal import push_expert, reach_expert


def multigoal_expert(env, seed: int) -> Expert:
    """``robopt/MultiGoal``: each episode heads straight for a goal drawn uniformly, at full speed.

    A new episode is recognised by its time fraction ``obs[:, 2] == 0``. The action points at the goal, scaled so
    its larger component is 1 (the fastest straight move in the [-1, 1]^2 box), or shorter when the goal is
    within one step. The straight line from the start to any goal passes between the walls by construction.
    """
    goals = env.goals  # [K, 2]
    generator = torch.Generator(device=env.device).manual_seed(seed)
    target = torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)  # [N] goal index per row

    def act(obs: torch.Tensor) -> torch.Tensor:
        nonlocal target
        new_episode = obs[:, 2] == 0.0  # [N]
        drawn = torch.randint(len(goals), target.shape, generator=generator, device=env.device)
        target = torch.where(new_episode, drawn, target)
        velocity = (goals[target] - obs[:, :2]) / env.dt  # [N, 2]: reaches the goal in one step
        scale = velocity.abs().amax(dim=1, keepdim=True).clamp_min(1.0)  # [N, 1]
        return velocity / scale

    return act


EXPERTS: dict[str, Callable[..., Expert]] = {
    "robopt/MultiGoal": multigoal_expert,
    "mujoco/GripperReach": reach_expert,
    "mujoco/GripperPush": push_expert,
}


def _text_expert(env, seed: int) -> Expert:
    from robopt.llm.env import text_expert

    return text_expert(env, seed)


EXPERTS["robopt/Text"] = _text_expert


def make_expert(env, seed: int = 0) -> Expert:
    """The scripted expert of ``env.env_id``; an id without one is a one-line ValueError."""
    if env.env_id not in EXPERTS:
        raise ValueError(f"no scripted expert for env {env.env_id!r}; available: {', '.join(sorted(EXPERTS))}")
    return EXPERTS[env.env_id](env, seed)
