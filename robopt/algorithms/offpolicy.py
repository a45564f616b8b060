"""The one off-policy loop: act, store every transition in a replay buffer, take gradient steps on samples.

Shapes: N envs, B sampled batch, D obs dim, A action dim.
A phase is ``train_freq`` env steps of all N envs (uniform random actions before ``learning_starts``
env steps) followed by ``gradient_steps`` updates of the algorithm on replay samples (after warm-up), and
priority updates from the TD errors it returns; an iteration (one logged row, the unit of checkpoints) is as
many whole phases as make ``iteration_steps`` env steps. Algorithms (SAC; TD3 and DDPG next) plug in through
``update(batch, progress) -> metrics`` (with ``td_error`` [B] when priorities are used), ``state_dict`` and
``load_state_dict``. The runner drives it like the on-policy loop (checkpoints, progress, NaN handling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from robopt.buffers.replay import ReplayBuffer
from robopt.config import option
from robopt.core.errors import NonFiniteError


@dataclass(frozen=True)
class OffPolicySchedule:
    """The loop's rhythm; nests in off-policy algorithm configs as ``algo.loop``."""

    learning_starts: int = option(1000, "env steps (summed over envs) of uniform random actions before learning")
    train_freq: int = option(1, "env steps per env between update phases (one iteration)")
    gradient_steps: int = option(1, "gradient updates per iteration (update-to-data ratio with train_freq x N)")
    batch_size: int = option(256, "replay samples per gradient update")
    buffer_size: int = option(1_000_000, "replay capacity in transitions (summed over envs)")
    save_buffer: bool = option(True, "save the replay buffer in checkpoints when under save_buffer_limit_mb")
    save_buffer_limit_mb: int = option(2048, "largest replay buffer saved with a checkpoint, in MB")
    iteration_steps: int = option(1000, "env steps (summed over envs) per logged iteration: whole update phases")
    sampler: str = option("uniform", "replay sampler", ("uniform", "prioritized"))
    priority_alpha: float = option(0.6, "prioritized replay: priority exponent alpha in [0, 1]")
    priority_beta: float = option(0.4, "prioritized replay: initial importance exponent beta in [0, 1], annealed to 1")
    n_step: int = option(1, "n-step returns (1: one-step targets)")

    def __post_init__(self) -> None:
        for name in ("train_freq", "gradient_steps", "batch_size", "buffer_size", "iteration_steps", "n_step"):
            if getattr(self, name) < 1:
                raise ValueError(f"loop.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"loop.learning_starts must be >= 0, got {self.learning_starts}")
        for name in ("priority_alpha", "priority_beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"loop.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.buffer_size < self.batch_size:
            raise ValueError(f"loop.buffer_size {self.buffer_size} is smaller than loop.batch_size {self.batch_size}")


class OffPolicyLoop:
    """Owns the env, the current observation and the replay buffer; one call to ``iteration`` = one phase."""

    def __init__(self, env, policy, algorithm, replay: ReplayBuffer, schedule: OffPolicySchedule, seed: int = 0):
        self.env, self.policy, self.algorithm, self.replay, self.schedule = env, policy, algorithm, replay, schedule
        self.obs = env.reset(seed=seed)  # [N, D]
        self.generator = torch.Generator(device=env.device).manual_seed(seed)
        self.iteration_count, self.env_steps = 0, 0
        self.uses_priorities = hasattr(replay.sampler, "anneal")  # uniform sampling: skip the priority update

    @property
    def steps_per_phase(self) -> int:
        return self.schedule.train_freq * self.env.num_envs

    @property
    def phases_per_iteration(self) -> int:
        return max(1, -(-self.schedule.iteration_steps // self.steps_per_phase))

    @property
    def steps_per_iteration(self) -> int:
        return self.phases_per_iteration * self.steps_per_phase

    @torch.no_grad()
    def _random_action(self) -> torch.Tensor:
        env = self.env
        unit = torch.rand(env.num_envs, env.action_dim, generator=self.generator, device=env.device)
        return env.action_low + unit * (env.action_high - env.action_low)

    @torch.no_grad()
    def collect(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        env, returns, lengths = self.env, [], []
        for _ in range(self.schedule.train_freq):
            if self.env_steps < self.schedule.learning_starts:
                action = self._random_action()
            elif hasattr(self.algorithm, "explore"):  # deterministic actors (TD3, DDPG) add their own noise
                action = self.algorithm.explore(self.obs, self.generator)
            else:
                action, _ = self.policy.act(self.obs)
            action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
            next_obs, reward, terminated, truncated, info = env.step(action)
            if not bool(torch.isfinite(next_obs).all() and torch.isfinite(reward).all()):
                raise NonFiniteError(f"non-finite observation or reward from env {env.env_id}")
            self.replay.extend(self.obs, action, reward, info["final_obs"], terminated, truncated)
            ended = info["episode_length"] > 0
            returns.append(info["episode_return"][ended])
            lengths.append(info["episode_length"][ended])
            self.obs = next_obs
            self.env_steps += env.num_envs
        return returns, lengths

    def iteration(self, progress: float) -> dict[str, float]:
        returns, lengths, sums, updates = [], [], {}, 0
        for _ in range(self.phases_per_iteration):
            phase_returns, phase_lengths = self.collect()
            returns += phase_returns
            lengths += phase_lengths
            updates += self._update_phase(progress, sums)
        self.iteration_count += 1
        values = {key: float(value) / updates for key, value in sums.items()}
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {name} ({value})")
        episode_return, episode_length = torch.cat(returns), torch.cat(lengths)
        if episode_return.numel() > 0:
            values["episode_return"] = float(episode_return.mean())
            values["episode_length"] = float(episode_length.float().mean())
        values["episodes"] = float(episode_return.numel())
        return values

    def _update_phase(self, progress: float, sums: dict[str, torch.Tensor]) -> int:
        """``gradient_steps`` updates once warm-up is over; metrics summed into ``sums``; returns the count."""
        if self.env_steps < self.schedule.learning_starts or self.replay.size < self.schedule.batch_size:
            return 0
        anneal = getattr(self.replay.sampler, "anneal", None)
        if anneal is not None:
            anneal(progress)
        for _ in range(self.schedule.gradient_steps):
            batch = self.replay.sample(self.schedule.batch_size, self.generator)
            metrics = self.algorithm.update(batch, progress)
            td_error = metrics.pop("td_error", None)
            if td_error is not None and self.uses_priorities:
                if not bool(torch.isfinite(td_error).all()):  # never let a NaN reach the priority tree
                    raise NonFiniteError(f"iteration {self.iteration_count + 1}: non-finite TD error")
                self.replay.update_priority(batch["slots"], td_error)
            for key, value in metrics.items():
                sums[key] = sums[key] + value if key in sums else value
        return self.schedule.gradient_steps

    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "obs": self.obs,
            "generator": self.generator.get_state(),
            "iteration": self.iteration_count,
            "env_steps": self.env_steps,
        }
        limit = self.schedule.save_buffer_limit_mb * 2**20
        if self.schedule.save_buffer and self.replay.nbytes <= limit:
            state["replay"] = self.replay.state_dict()
        if hasattr(self.env, "state_dict"):
            state["env"] = self.env.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.generator.set_state(state["generator"])
        self.iteration_count, self.env_steps = state["iteration"], state["env_steps"]
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        if state.get("env") is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self.obs = state["obs"].to(self.env.device)


def build_replay(schedule: OffPolicySchedule, gamma: float, env) -> ReplayBuffer:
    """The replay buffer ``schedule`` describes (size, sampler, n-step) for discount ``gamma``, on the env's device."""
    from robopt.buffers.replay import ReplayStorage
    from robopt.buffers.samplers import PrioritizedSampler, UniformSampler
    from robopt.buffers.transforms import NStep

    per_env = max(1, -(-schedule.buffer_size // env.num_envs))
    storage = ReplayStorage(per_env, env.num_envs, env.obs_dim, env.action_dim, device=env.device)
    if schedule.sampler == "prioritized":
        sampler = PrioritizedSampler(
            storage.capacity, schedule.priority_alpha, schedule.priority_beta, device=env.device
        )
    else:
        sampler = UniformSampler(storage.capacity, device=env.device)
    transforms = (NStep(schedule.n_step, gamma),) if schedule.n_step > 1 else ()
    return ReplayBuffer(storage, sampler, transforms, gamma=gamma, batch_size=schedule.batch_size)
