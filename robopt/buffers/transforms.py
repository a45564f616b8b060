"""Sample-time replay transforms: ``transform(batch, storage, generator) -> batch``.

Shapes: B batch, D obs dim, G goal dim. A batch is the dict ``ReplayBuffer.gather`` builds (obs [B, D],
action [B, A], reward [B], next_obs [B, D], terminated [B], truncated [B], discount [B], weights [B],
slots [B]). Transforms read the storage's episode bookkeeping (``ReplayStorage.episode_bounds``) to find the later
steps of each row's episode; everything stays on the storage device (no host sync). They change rows, never the
sampling weights, so they compose with any sampler.

Order: ``NStep`` rebuilds reward, next_obs, terminated, truncated and discount from the storage, and ``Hindsight``
recomputes a one-step reward from the goals, so the two are not meant to be combined.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from robopt.buffers.replay import ReplayStorage

HINDSIGHT_STRATEGIES = ("future", "final", "episode")


class NStep:
    """n-step returns (Sutton & Barto 2018, eq. 7.1) cut at episode ends and at the newest written step.

    For a row at step t of env n, k = min(n, steps to the episode's last stored step + 1) steps are used:
        reward     = sum_{i<k} gamma^i r_{t+i}
        next_obs   = next_obs_{t+k-1}   (the final obs when the episode ended there)
        terminated = terminated_{t+k-1} (a termination ends the window, so it can only be its last step)
        truncated  = truncated_{t+k-1}
        discount   = gamma^k            (bootstrap: reward + discount * (1 - terminated) * Q(next_obs))
    A truncation inside the window stops it and bootstraps from that step's final obs; a termination stops it
    with no bootstrap; the newest written step stops it and bootstraps from its next_obs.
    """

    reward_rewrite = "sums n one-step rewards"  # ReplayTransform.reward_rewrite: at most one per buffer

    def __init__(self, n: int, gamma: float) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n-step n must be an integer >= 1, got {n!r}")
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise ValueError(f"n-step gamma must be in [0, 1], got {gamma!r}")
        self.n, self.gamma = n, float(gamma)

    def __call__(
        self, batch: dict[str, torch.Tensor], storage: ReplayStorage, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        slots = batch["slots"]  # [B]
        env, start = storage.slot_env(slots), storage.slot_step(slots)  # [B], [B]
        _, last = storage.episode_bounds(slots)  # [B]
        end = torch.minimum(start + (self.n - 1), last)  # [B] last step used, t + k - 1
        used = end - start + 1  # [B] k >= 1
        reward = torch.zeros_like(batch["reward"])
        for i in range(self.n):  # loop over the window, never over rows
            step_reward = storage.field_at("reward", storage.step_slot(torch.minimum(start + i, end), env))
            reward = reward + torch.where(used > i, (self.gamma**i) * step_reward, 0.0)
        end_slot = storage.step_slot(end, env)
        return {
            **batch,
            "reward": reward,
            "next_obs": storage.field_at("next_obs", end_slot),
            "terminated": storage.field_at("terminated", end_slot),
            "truncated": storage.field_at("truncated", end_slot),
            "discount": torch.pow(self.gamma, used.to(reward.dtype)),
        }


def _check_slice(name: str, goal: slice) -> None:
    if not (isinstance(goal, slice) and isinstance(goal.start, int) and isinstance(goal.stop, int)):
        raise ValueError(f"hindsight {name} must be a slice with integer start and stop, got {goal!r}")
    if goal.step not in (None, 1) or not 0 <= goal.start < goal.stop:
        raise ValueError(f"hindsight {name} must be a non-empty slice(start, stop) with 0 <= start, got {goal!r}")


class Hindsight:
    """Hindsight experience replay (Andrychowicz et al. 2017, "Hindsight Experience Replay", Alg. 1).

    Goals are slices of the flat observation: ``obs[..., desired_goal]`` is the desired goal (in obs and
    next_obs), ``next_obs[..., achieved_goal]`` the goal a transition achieved. Each row is relabelled with
    probability k / (k + 1) (k = 4: 80 %) by a goal achieved at step t' of the same env and episode, among the
    steps still in the ring:
        ``future``  t' uniform in [t, last]  (t' = t included: the goal the transition itself reached, as in
                    the reference implementation, which samples future achieved goals from the next states)
        ``final``   t' = last, the episode's last stored step
        ``episode`` t' uniform in [first, last] (what remains of the episode if the ring overwrote its start)
    The new goal goes into the desired-goal slice of obs and next_obs, and the reward of relabelled rows becomes
    ``compute_reward(achieved_goal=next_obs[:, achieved_goal], desired_goal=new_goal)`` [B]; the other rows keep
    their stored reward. terminated, truncated and the sampling weights are left as stored.
    """

    reward_rewrite = "relabels one-step rewards"  # ReplayTransform.reward_rewrite: at most one per buffer

    def __init__(
        self,
        compute_reward: Callable[..., torch.Tensor],
        achieved_goal: slice,
        desired_goal: slice,
        strategy: str = "future",
        k: float = 4,
    ) -> None:
        if strategy not in HINDSIGHT_STRATEGIES:
            raise ValueError(f"hindsight strategy {strategy!r} is unknown; allowed: {', '.join(HINDSIGHT_STRATEGIES)}")
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
            raise ValueError(f"hindsight k must be a finite number >= 0, got {k!r}")
        _check_slice("achieved_goal", achieved_goal)
        _check_slice("desired_goal", desired_goal)
        if achieved_goal.stop - achieved_goal.start != desired_goal.stop - desired_goal.start:
            raise ValueError(f"hindsight achieved_goal {achieved_goal} and desired_goal {desired_goal} differ in size")
        self.compute_reward, self.strategy, self.k = compute_reward, strategy, k
        self.achieved_goal, self.desired_goal = achieved_goal, desired_goal
        self.relabel_fraction = k / (k + 1)

    def check(self, storage: ReplayStorage) -> None:
        """Both goal slices fit inside the stored observation."""
        for name, goal in (("achieved_goal", self.achieved_goal), ("desired_goal", self.desired_goal)):
            if goal.stop > storage.obs_dim:
                raise ValueError(f"hindsight {name} {goal} lies outside obs_dim {storage.obs_dim}")

    def goal_step(self, storage: ReplayStorage, slots: torch.Tensor, draw: torch.Tensor) -> torch.Tensor:
        """Absolute step t' [B] whose achieved goal replaces the goal of ``slots`` [B], given uniforms ``draw`` [B]."""
        first, last = storage.episode_bounds(slots)  # [B]
        low = {"future": storage.slot_step(slots), "final": last, "episode": first}[self.strategy]
        span = last - low + 1  # [B] >= 1 candidate steps
        return low + torch.minimum((draw * span).long(), span - 1)

    def __call__(
        self, batch: dict[str, torch.Tensor], storage: ReplayStorage, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        self.check(storage)
        slots = batch["slots"]  # [B]
        B = slots.shape[0]
        draw = torch.rand(2, B, device=slots.device, generator=generator)  # [2, B]
        relabel = draw[0] < self.relabel_fraction  # [B]
        goal_slot = storage.step_slot(self.goal_step(storage, slots, draw[1]), storage.slot_env(slots))
        goal = storage.field_at("next_obs", goal_slot)[:, self.achieved_goal]  # [B, G]
        obs, next_obs = batch["obs"].clone(), batch["next_obs"].clone()
        obs[:, self.desired_goal] = torch.where(relabel[:, None], goal, obs[:, self.desired_goal])
        next_obs[:, self.desired_goal] = torch.where(relabel[:, None], goal, next_obs[:, self.desired_goal])
        reward = self.compute_reward(
            achieved_goal=next_obs[:, self.achieved_goal], desired_goal=next_obs[:, self.desired_goal]
        )
        if not isinstance(reward, torch.Tensor) or tuple(reward.shape) != (B,):
            shape = list(reward.shape) if isinstance(reward, torch.Tensor) else type(reward).__name__
            raise ValueError(f"hindsight compute_reward must return a tensor of shape [{B}] (batch), got {shape}")
        reward = torch.where(relabel, reward.to(batch["reward"].dtype), batch["reward"])
        return {**batch, "obs": obs, "next_obs": next_obs, "reward": reward}
