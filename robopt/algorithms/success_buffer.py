"""The success buffer of OGPO's regularizer: (observation, action) pairs of the run's own successful episodes.

The off-policy loop hands every env step to ``observe`` (the algorithm's hook). Each env row's episode so far is
kept in [N, L] tensors; when it ends, it is kept if it succeeded (``info["is_success"]`` on goal tasks, or an
episode return at or above ``success_return``) and fits in L = ``max_length`` steps, and its pairs go into a
ring of ``capacity`` pairs (the oldest are overwritten). An episode longer than L is not kept.
"""

from __future__ import annotations

import math

import torch


class SuccessBuffer:
    def __init__(self, capacity: int, max_length: int, success_return: float, env) -> None:
        if capacity < 1 or max_length < 1:
            raise ValueError(f"success buffer capacity and max_length must be >= 1, got {capacity}, {max_length}")
        n, device = env.num_envs, env.device
        self.capacity, self.max_length, self.success_return = capacity, max_length, success_return
        self.episode_obs = torch.zeros(n, max_length, env.obs_dim, device=device)
        self.episode_action = torch.zeros(n, max_length, env.action_dim, device=device)
        self.episode_length = torch.zeros(n, dtype=torch.int64, device=device)
        self.obs = torch.zeros(capacity, env.obs_dim, device=device)
        self.action = torch.zeros(capacity, env.action_dim, device=device)
        self.size, self.cursor, self.episodes = 0, 0, 0

    def observe(self, obs: torch.Tensor, action: torch.Tensor, done: torch.Tensor, info: dict) -> None:
        """One env step of every row: obs [N, D], action [N, A], done [N] (terminated or truncated), the step's info."""
        rows = torch.arange(obs.shape[0], device=obs.device)
        fits = self.episode_length < self.max_length
        at = self.episode_length.clamp(max=self.max_length - 1)
        self.episode_obs[rows[fits], at[fits]] = obs[fits].to(self.episode_obs.dtype)
        self.episode_action[rows[fits], at[fits]] = action[fits].to(self.episode_action.dtype)
        self.episode_length += 1
        if not bool(done.any()):
            return
        success = torch.zeros_like(done)
        if "is_success" in info:
            success |= info["is_success"].to(torch.bool)
        if math.isfinite(self.success_return):
            success |= info["episode_return"] >= self.success_return
        keep = done & success & (self.episode_length <= self.max_length)
        for row in keep.nonzero().flatten().tolist():
            self._add(
                self.episode_obs[row, : int(self.episode_length[row])],
                self.episode_action[row, : int(self.episode_length[row])],
            )
            self.episodes += 1
        self.episode_length[done] = 0

    def _add(self, obs: torch.Tensor, action: torch.Tensor) -> None:
        count = min(obs.shape[0], self.capacity)
        obs, action = obs[-count:], action[-count:]
        slots = (self.cursor + torch.arange(count, device=obs.device)) % self.capacity
        self.obs[slots], self.action[slots] = obs, action
        self.cursor = (self.cursor + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def sample(self, count: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` pairs drawn uniformly with replacement (the buffer must hold at least one)."""
        index = torch.randint(0, self.size, (count,), generator=generator, device=self.obs.device)
        return self.obs[index], self.action[index]

    def state_dict(self) -> dict:
        return {
            "obs": self.obs[: self.size].clone(),
            "action": self.action[: self.size].clone(),
            "cursor": self.cursor,
            "episodes": self.episodes,
            "episode_obs": self.episode_obs.clone(),
            "episode_action": self.episode_action.clone(),
            "episode_length": self.episode_length.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.size = state["obs"].shape[0]
        self.obs[: self.size], self.action[: self.size] = state["obs"], state["action"]
        self.cursor, self.episodes = int(state["cursor"]), int(state["episodes"])
        self.episode_obs.copy_(state["episode_obs"])
        self.episode_action.copy_(state["episode_action"])
        self.episode_length.copy_(state["episode_length"])
