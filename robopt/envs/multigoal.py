"""``robopt/MultiGoal``: a batched torch point mass with K equally good goals behind K walls.

Shapes: N envs, K goals (= walls), D = 3 obs dim (x, y, t / max_steps), A = 2 action dim (velocity).

Geometry: goal k sits on the unit circle at angle ``2 pi k / K + pi / 4`` (K = 4: the diagonals). Wall k is a
disc of radius ``min(0.22, 0.5 sin(pi / K) - 0.1)`` centred at radius 0.5, halfway (in angle) between goals k
and k + 1, so the straight line from the origin toward either goal passes at least 0.1 clear of it while the
line toward the mean of their directions runs into it. The best first actions form K separated modes and the
mean of two of them is bad: a multimodal benchmark for flow or diffusion policies against a Gaussian.

Step: the action is clipped to [-1, 1]^2, ``p' = clip(p + dt * action, -1.5, 1.5)`` with dt = 0.1; a move
whose segment p -> p' crosses a wall is cancelled (p' = p) and costs 1. Reward
``-0.1 * min_k ||p' - g_k|| - 1 [blocked] + 10 [reached]``; reaching a goal (``||p' - g_k|| < 0.1``)
terminates, ``max_steps`` (default 50) truncates. Start: U(-0.05, 0.05) per coordinate.
"""

from __future__ import annotations

import math

import torch

from robopt.envs.episode_stats import EpisodeTracker
from robopt.envs.native_env import check_action

ENV_ID = "robopt/MultiGoal"
DT = 0.1
GOAL_RADIUS = 1.0  # goals on the unit circle
GOAL_TOLERANCE = 0.1  # reached when closer than this
WALL_CENTER_RADIUS = 0.5
ARENA = 1.5  # |x|, |y| clipped to this
START_NOISE = 0.05
SHAPING, WALL_PENALTY, GOAL_BONUS = 0.1, 1.0, 10.0
MAX_GOALS = 8  # beyond this the walls that keep the goal lines clear become too thin to block anything
OPTIONS = ("seed", "num_goals", "max_steps")


def goal_positions(num_goals: int) -> torch.Tensor:
    """Goal centres [K, 2] (float32): angle ``2 pi k / K + pi / 4`` on the unit circle."""
    angle = 2 * math.pi * torch.arange(num_goals, dtype=torch.float64) / num_goals + math.pi / 4
    return (GOAL_RADIUS * torch.stack([angle.cos(), angle.sin()], dim=1)).float()


def wall_positions(num_goals: int) -> tuple[torch.Tensor, float]:
    """Wall disc centres [K, 2] (wall k halfway between goals k and k + 1) and their common radius."""
    angle = 2 * math.pi * (torch.arange(num_goals, dtype=torch.float64) + 0.5) / num_goals + math.pi / 4
    radius = min(0.22, WALL_CENTER_RADIUS * math.sin(math.pi / num_goals) - 0.1)
    return (WALL_CENTER_RADIUS * torch.stack([angle.cos(), angle.sin()], dim=1)).float(), radius


def segment_hits_disc(start: torch.Tensor, end: torch.Tensor, center: torch.Tensor, radius: float) -> torch.Tensor:
    """Whether segments start -> end [N, 2] pass within ``radius`` of any centre [K, 2]: [N] bool."""
    delta = (end - start)[:, None, :]  # [N, 1, 2]
    to_center = center[None] - start[:, None, :]  # [N, K, 2]
    length2 = (delta * delta).sum(-1).clamp_min(1e-12)  # [N, 1]
    along = ((to_center * delta).sum(-1) / length2).clamp(0.0, 1.0)  # [N, K]: closest point's segment fraction
    gap = to_center - along[..., None] * delta  # [N, K, 2]
    return ((gap * gap).sum(-1) < radius * radius).any(dim=1)


class MultiGoalEnv:
    """``robopt/MultiGoal`` as one batch of N envs; implements ``robopt.core.protocols.VecEnv``.

    ``info`` adds ``reached_goal`` [N] int64: the goal index reached at a step that terminated, -1 elsewhere.
    """

    env_id = ENV_ID
    obs_dim = 3
    action_dim = 2
    dt = DT

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        num_goals: int = 4,
        max_steps: int = 50,
    ) -> None:
        for name, value, low in (("num_envs", num_envs, 1), ("num_goals", num_goals, 2), ("max_steps", max_steps, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{ENV_ID}: {name} must be an integer >= {low}, got {value!r}")
        if num_goals > MAX_GOALS:
            raise ValueError(f"{ENV_ID}: num_goals must be an integer in [2, {MAX_GOALS}], got {num_goals}")
        self.num_envs, self.num_goals, self.max_steps = num_envs, num_goals, max_steps
        self.device = torch.device(device)
        self.action_low = torch.full((2,), -1.0, device=self.device)  # [A]
        self.action_high = torch.full((2,), 1.0, device=self.device)  # [A]
        self.goals = goal_positions(num_goals).to(self.device)  # [K, 2]
        walls, self.wall_radius = wall_positions(num_goals)
        self.walls = walls.to(self.device)  # [K, 2]
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed) if seed is not None else self._generator.seed()
        self._position = self._start_positions()  # [N, 2]
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)  # [N]
        self._tracker = EpisodeTracker(num_envs, self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every row; a seed restarts the start-noise stream (same seed, same episodes). Returns obs [N, 3]."""
        if seed is not None:
            self._generator.manual_seed(seed)
        self._position = self._start_positions()
        self._elapsed.zero_()
        self._tracker.reset()
        return self._observe(self._position, self._elapsed)

    def step(self, action: torch.Tensor):
        """Step every row with action [N, 2]; see the module docstring and ``robopt.core.protocols.VecEnv``."""
        check_action(self.env_id, action, self.num_envs, self.action_dim)
        action = action.detach().to(self.device, torch.float32)
        action = torch.maximum(torch.minimum(action, self.action_high), self.action_low)
        position = self._position
        moved = (position + self.dt * action).clamp(-ARENA, ARENA)  # [N, 2]
        blocked = segment_hits_disc(position, moved, self.walls, self.wall_radius)  # [N]
        moved = torch.where(blocked[:, None], position, moved)
        distance = (moved[:, None, :] - self.goals[None]).norm(dim=-1)  # [N, K]
        nearest_distance, nearest = distance.min(dim=1)  # [N], [N]
        terminated = nearest_distance < GOAL_TOLERANCE  # goals are > 0.2 apart: at most one is reached
        reward = -SHAPING * nearest_distance - WALL_PENALTY * blocked.float() + GOAL_BONUS * terminated.float()
        elapsed = self._elapsed + 1
        truncated = elapsed >= self.max_steps
        final_obs = self._observe(moved, elapsed)
        done = terminated | truncated
        # A fresh start is drawn for every row each step (no device sync, one RNG draw per step whatever ends).
        self._position = torch.where(done[:, None], self._start_positions(), moved)
        self._elapsed = elapsed.masked_fill(done, 0)
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {
            "final_obs": final_obs,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "reached_goal": torch.where(terminated, nearest, torch.full_like(nearest, -1)),
        }
        return self._observe(self._position, self._elapsed), reward, terminated, truncated, info

    def state_dict(self) -> dict:
        """Positions, time-limit counters, episode trackers and start-noise RNG: enough to continue exactly."""
        return {
            "num_goals": self.num_goals,
            "max_steps": self.max_steps,
            "position": self._position.clone(),
            "elapsed": self._elapsed.clone(),
            "returns": self._tracker.returns.clone(),
            "lengths": self._tracker.lengths.clone(),
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict``'s output into an env with the same ``num_envs``, ``num_goals`` and ``max_steps``."""
        saved = (tuple(state["position"].shape), state["num_goals"], state["max_steps"])
        expected = ((self.num_envs, 2), self.num_goals, self.max_steps)
        if saved != expected:
            raise ValueError(f"{ENV_ID}: saved state is for (shape, num_goals, max_steps) {saved}, not {expected}")
        self._position = state["position"].to(self.device, torch.float32).clone()
        self._elapsed = state["elapsed"].to(self.device, torch.int64).clone()
        self._tracker.returns.copy_(state["returns"])
        self._tracker.lengths.copy_(state["lengths"])
        self._generator.set_state(state["generator"].cpu())

    def close(self) -> None:
        """Nothing to release."""

    def _start_positions(self) -> torch.Tensor:
        """Fresh starts [N, 2] ~ U(-0.05, 0.05) per coordinate."""
        noise = torch.rand(self.num_envs, 2, generator=self._generator, device=self.device)
        return START_NOISE * (2.0 * noise - 1.0)

    def _observe(self, position: torch.Tensor, elapsed: torch.Tensor) -> torch.Tensor:
        """Observation [N, 3]: position and the fraction of the episode elapsed (a new tensor)."""
        return torch.cat([position, (elapsed.float() / self.max_steps)[:, None]], dim=1)


def make_multigoal(num_envs: int, device: str | torch.device = "cpu", **kwargs) -> MultiGoalEnv:
    """Factory for ``make_env('robopt/MultiGoal', ...)``; options: seed, num_goals, max_steps."""
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise ValueError(f"{ENV_ID}: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}")
    return MultiGoalEnv(num_envs, device=device, **kwargs)
