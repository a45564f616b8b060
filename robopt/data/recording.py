"""Recording whole episodes from a VecEnv with any action function, with optional Gaussian action noise.

Shapes: N envs, T steps of one episode, D obs dim, A action dim, H action chunk.

A policy acting in chunks (``horizon`` H > 1) is recorded one action per step: ``act_fn`` returns chunks
[N, H * A] (row-major: step h is ``[:, h * A:(h + 1) * A]``, as ``robopt.envs.chunking.ActionChunkEnv`` executes
them) and each row plays its chunk's actions in turn on the per-step env, asking for a new chunk after H steps or
as soon as its episode ended, whichever comes first. Observations, actions and rewards are thus per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from robopt.options import ConfigError


@dataclass(frozen=True)
class Episode:
    """One whole episode as numpy arrays; ``observations`` includes the final observation."""

    observations: np.ndarray  # [T + 1, D] float32
    actions: np.ndarray  # [T, A] float32
    rewards: np.ndarray  # [T] float32
    terminations: np.ndarray  # [T] bool
    truncations: np.ndarray  # [T] bool
    success: bool | None = None  # the env's info["is_success"] at the episode's end (None: it reports none)

    @property
    def length(self) -> int:
        return len(self.rewards)

    @property
    def episode_return(self) -> float:
        return float(np.sum(self.rewards, dtype=np.float64))


@torch.no_grad()
def record_episodes(
    env,
    act_fn: Callable[[torch.Tensor], torch.Tensor],
    episodes: int,
    action_noise: float = 0.0,
    seed: int = 0,
    progress: bool = True,
    horizon: int = 1,
) -> list[Episode]:
    """Step ``env`` with ``act_fn(obs [N, D]) -> action [N, A]`` until exactly ``episodes`` episodes have ended.

    ``horizon`` H > 1: ``act_fn`` returns chunks [N, H * A], played one action a step (see the module doc); it is
    called on every row whenever any row needs a new chunk, so it must act on each row independently of the others
    (a deterministic policy does). Each action gets Gaussian noise of std ``action_noise * (high - low) / 2``
    (drawn from a generator seeded with ``seed``) and is then clipped to the action bounds; the clipped action is
    what the env receives and what is stored. Episodes are kept in the order they end (rows ending at the same
    step: by row index); rows ending after the count is reached, and episodes still running at the end, are dropped.
    """
    if episodes < 1:
        raise ConfigError(f"episodes must be at least 1, got {episodes}")
    if not action_noise >= 0.0:
        raise ConfigError(f"action noise must be at least 0, got {action_noise}")
    low, high = env.action_low, env.action_high  # [A]
    if action_noise > 0 and not bool(torch.isfinite(high - low).all()):
        raise ConfigError(f"action noise needs finite action bounds; {env.env_id} has {low.tolist()}..{high.tolist()}")
    noise_std = action_noise * (high - low) / 2  # [A]
    generator = torch.Generator(device=env.device).manual_seed(seed)
    player = _ChunkPlayer(act_fn, horizon, env)
    obs = env.reset(seed=seed)  # [N, D]
    rows = [_RowBuffer(o) for o in obs.cpu().numpy()]
    finished: list[Episode] = []
    with _episode_bar(episodes, progress) as update:
        while len(finished) < episodes:
            action = player.next_action(obs)  # [N, A]
            if action_noise > 0:
                noise = torch.randn(action.shape, generator=generator, device=env.device)
                action = action + noise_std * noise
            action = torch.maximum(torch.minimum(action, high), low)  # [N, A]
            obs, reward, terminated, truncated, info = env.step(action)
            player.episodes_ended(terminated | truncated)
            arrays = [t.cpu().numpy() for t in (action, reward, terminated, truncated, obs, info["final_obs"])]
            success = info["is_success"].cpu().numpy() if "is_success" in info else None
            action_np, reward_np, terminated_np, truncated_np, obs_np, final_obs_np = arrays
            for row, buffer in enumerate(rows):
                buffer.add(action_np[row], reward_np[row], terminated_np[row], truncated_np[row])
                if not (terminated_np[row] or truncated_np[row]):
                    buffer.observations.append(obs_np[row])
                    continue
                if len(finished) < episodes:
                    finished.append(buffer.finish(final_obs_np[row], None if success is None else bool(success[row])))
                rows[row] = _RowBuffer(obs_np[row])  # the env already reset this row: obs is the new episode's first
            update(len(finished))
    return finished


class _ChunkPlayer:
    """``act_fn``'s actions one step at a time: each row plays its chunk [H, A] and asks for a new one after H steps
    or once its episode ended (``episodes_ended``). With H = 1, ``act_fn`` is called every step."""

    def __init__(self, act_fn: Callable[[torch.Tensor], torch.Tensor], horizon: int, env) -> None:
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ConfigError(f"action horizon must be an integer >= 1, got {horizon!r}")
        self.act_fn, self.horizon, self.env = act_fn, horizon, env
        self.chunk: torch.Tensor | None = None  # [N, H, A]
        self.index = torch.full((env.num_envs,), horizon, dtype=torch.int64, device=env.device)  # [N]: H = spent

    def _ask(self, obs: torch.Tensor) -> torch.Tensor:
        """act_fn(obs) checked: [N, H * A] float32 on the env's device."""
        env, width = self.env, self.horizon * self.env.action_dim
        action = torch.as_tensor(self.act_fn(obs), dtype=torch.float32, device=env.device)
        if action.shape != (env.num_envs, width):
            raise ValueError(
                f"act_fn returned actions of shape {tuple(action.shape)}, expected [{env.num_envs}, {width}]"
            )
        return action

    def next_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The action [N, A] of this step for obs [N, D]."""
        if self.horizon == 1:
            return self._ask(obs)
        replan = self.index >= self.horizon  # [N]
        if bool(replan.any()):
            fresh = self._ask(obs).reshape(self.env.num_envs, self.horizon, self.env.action_dim)  # [N, H, A]
            self.chunk = fresh if self.chunk is None else torch.where(replan[:, None, None], fresh, self.chunk)
            self.index = torch.where(replan, torch.zeros_like(self.index), self.index)
        action = self.chunk[torch.arange(self.env.num_envs, device=self.index.device), self.index]  # [N, A]
        self.index = self.index + 1
        return action

    def episodes_ended(self, ended: torch.Tensor) -> None:
        """Rows whose episode ended at this step [N] drop the rest of their chunk: the next step replans them."""
        if self.horizon > 1:
            self.index = torch.where(ended.to(self.index.device), torch.full_like(self.index, self.horizon), self.index)


class _RowBuffer:
    """The running episode of one env row: lists of per-step arrays."""

    def __init__(self, first_obs: np.ndarray) -> None:
        self.observations = [first_obs]
        self.actions, self.rewards, self.terminations, self.truncations = [], [], [], []

    def add(self, action, reward, terminated, truncated) -> None:
        self.actions.append(action)
        self.rewards.append(reward)
        self.terminations.append(terminated)
        self.truncations.append(truncated)

    def finish(self, final_obs: np.ndarray, success: bool | None = None) -> Episode:
        return Episode(
            observations=np.stack([*self.observations, final_obs]).astype(np.float32),
            actions=np.stack(self.actions).astype(np.float32),
            rewards=np.asarray(self.rewards, dtype=np.float32),
            terminations=np.asarray(self.terminations, dtype=bool),
            truncations=np.asarray(self.truncations, dtype=bool),
            success=success,
        )


@contextlib.contextmanager
def _episode_bar(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A rich bar over finished episodes on stderr; yields ``update(done)``; a no-op when disabled."""
    if not enabled:
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]collect"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("collect", total=total)
        yield lambda done: bar.update(task, completed=done)
