"""The one off-policy loop: act, store every transition in a replay buffer, take gradient steps on samples.

Shapes: N envs, B sampled batch, D obs dim, A action dim.
A phase is ``train_freq`` env steps of all N envs (uniform random actions before ``learning_starts``
env steps) followed by ``gradient_steps`` updates of the algorithm on replay samples (after warm-up), and
priority updates from the TD errors it returns; an iteration (one logged row, the unit of checkpoints) is as
many whole phases as make ``iteration_steps`` env steps. Algorithms (SAC; TD3 and DDPG next) plug in through
``update(batch, progress) -> metrics`` (with ``td_error`` [B] when priorities are used), ``state_dict`` and
``load_state_dict``. The runner drives it like the on-policy loop (checkpoints, progress, NaN handling).

The replay buffer a schedule describes (size, sampler, n-step or hindsight transforms: ``build_replay``) is made
here; what the algorithms' updates are made of (Q critics, the optimizer step, ``frozen``) and SAC's and TD3's update
orders are in ``robopt.algorithms.offpolicy_updates``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from robopt.buffers.replay import ReplayBuffer
from robopt.core.errors import NonFiniteError
from robopt.distributed.collective import LOCAL, Collective
from robopt.envs.episode_stats import EnvLog
from robopt.options import ConfigError, option

__all__ = ["OffPolicyLoop", "OffPolicySchedule", "build_replay", "check_replay_policy", "replay_transforms"]


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
    her_strategy: str = option(
        "none", "hindsight relabelling of goals (goal tasks only)", ("none", "future", "final", "episode")
    )
    her_k: float = option(4.0, "hindsight: relabelled goals per real goal (4: 80% of samples relabelled)")
    dataset: str = option(
        "",
        "Minari dataset (id or directory) written into the replay before the first env step: "
        "offline RL and offline-to-online fine-tuning ('' : none)",
    )
    dataset_root: str = option("", "directory of Minari datasets ('' : $MINARI_DATASETS_PATH, else ~/.minari/datasets)")
    offline_updates: int = option(0, "gradient updates on the dataset alone before the first env step (needs dataset)")

    def __post_init__(self) -> None:
        for name in ("train_freq", "gradient_steps", "batch_size", "buffer_size", "iteration_steps", "n_step"):
            if getattr(self, name) < 1:
                raise ValueError(f"loop.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"loop.learning_starts must be >= 0, got {self.learning_starts}")
        for name in ("priority_alpha", "priority_beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"loop.{name} must be in [0, 1], got {getattr(self, name)}")
        if not self.her_k >= 0.0 or self.her_k == float("inf"):
            raise ValueError(f"loop.her_k must be a finite number >= 0, got {self.her_k}")
        if self.her_strategy != "none" and self.n_step > 1:
            raise ValueError("loop.n_step > 1 cannot be combined with loop.her_strategy (HER relabels 1-step rewards)")
        if self.offline_updates < 0:
            raise ValueError(f"loop.offline_updates must be >= 0, got {self.offline_updates}")
        if self.offline_updates > 0 and not self.dataset:
            raise ValueError(f"loop.offline_updates={self.offline_updates} needs loop.dataset (the data to learn from)")
        if self.dataset and (self.n_step > 1 or self.her_strategy != "none"):
            raise ValueError("loop.dataset takes 1-step targets: set loop.n_step=1 and loop.her_strategy=none")
        if self.buffer_size < self.batch_size:
            raise ValueError(f"loop.buffer_size {self.buffer_size} is smaller than loop.batch_size {self.batch_size}")


class OffPolicyLoop:
    """Owns the env, the current observation and the replay buffer; one call to ``iteration`` = one phase."""

    def __init__(
        self, env, policy, algorithm, replay: ReplayBuffer, schedule: OffPolicySchedule, seed: int = 0, env_id: str = ""
    ):
        self.env, self.policy, self.algorithm, self.replay, self.schedule = env, policy, algorithm, replay, schedule
        self.collective = LOCAL  # data-parallel: this rank's envs and replay are one share of the run's
        self.obs = env.reset(seed=seed)  # [N, D]
        self.generator = torch.Generator(device=env.device).manual_seed(seed)
        self.iteration_count, self.env_steps = 0, 0
        self.env_log = EnvLog()  # env statistics (info["log"]) of the current iteration
        self.uses_priorities = hasattr(replay.sampler, "anneal")  # uniform sampling: skip the priority update
        self.observe = getattr(algorithm, "observe", None)  # an algorithm that keeps episodes of its own (OGPO)
        # the observation normalizer actor and critics share, fed every observation the loop collects
        self.normalizer = policy.normalizer if policy.normalizer.enabled else None
        # offline data (robopt.algorithms.offline_data): its statistics fit the normalizer once, then it stays fixed
        self.offline_summary = ""  # the start line's words on the dataset, when there is one
        if schedule.dataset:
            from robopt.algorithms.offline_data import load_offline_data

            repeated = load_offline_data(schedule, replay, env, env_id, policy)
            self.normalizer = None
            self.offline_summary = (
                f"offline data {schedule.dataset}: {replay.size - repeated} transitions"
                + (f" (+{repeated} repeated to fill the last replay row)" if repeated else "")
                + f", {schedule.offline_updates} offline updates first"
            )
        self.offline_iterations = -(-schedule.offline_updates // (schedule.gradient_steps * self.phases_per_iteration))
        if env.num_envs * schedule.train_freq > schedule.buffer_size:
            raise ConfigError(
                f"env.num_envs x algo.loop.train_freq = {env.num_envs} x {schedule.train_freq} = "
                f"{env.num_envs * schedule.train_freq} transitions per phase do not fit in algo.loop.buffer_size "
                f"{schedule.buffer_size}; raise algo.loop.buffer_size or lower train_freq or num_envs"
            )

    RANK_KEYS = ("obs", "env", "replay", "generator")
    """State that differs between the ranks of a data-parallel run (each rank's envs, replay and sampling stream)."""

    def use_collective(self, collective: Collective) -> None:
        """Data-parallel training: each rank acts in its own envs and samples its own replay (``batch_size / K`` rows
        per update); the algorithm averages every gradient over ranks; env steps, observation statistics, the stop
        on non-finite values and the logged metrics are global. Rank 0's weights are broadcast to all."""
        algorithm = self.algorithm
        if not hasattr(algorithm, "collective"):  # what optimizer_step reads in the algorithm's update
            raise ConfigError(f"{type(algorithm).__name__} runs in one process; launch without torchrun/--nproc")
        if self.schedule.dataset:
            raise ConfigError("algo.loop.dataset (offline data) runs in one process; launch without torchrun/--nproc")
        if getattr(algorithm, "compiled", None) is not None:
            raise ConfigError(
                "algo.compile=true runs in one process; data-parallel training takes the eager update: set "
                "algo.compile=false"
            )
        algorithm.collective = collective  # every optimizer step averages its gradients over ranks
        self.collective = collective
        modules = [self.policy, *(v for v in vars(self.algorithm).values() if isinstance(v, torch.nn.Module))]
        for module in modules:
            collective.broadcast_module_(module)

    @property
    def steps_per_phase(self) -> int:
        """Env steps per phase, summed over envs (and over ranks in a data-parallel run); a decision of an
        action-chunk env (``policy.horizon`` H) is H env steps, as on-policy."""
        return (
            self.schedule.train_freq * self.env.num_envs * self.collective.world_size * getattr(self.env, "horizon", 1)
        )

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
    def collect(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``train_freq`` env steps into the replay; returns episode return [S, N], length [S, N], all finite [] and
        success [S, N] of episodes that ended (None when the env reports no ``is_success``).

        Nothing here waits on the device: episode stats are masked and observations checked once per iteration.
        """
        env, returns, lengths, successes, seen = self.env, [], [], [], []
        finite = torch.ones((), dtype=torch.bool, device=env.device)
        for _ in range(self.schedule.train_freq):
            seen.append(self.obs)
            if self.env_steps < self.schedule.learning_starts:
                action = self._random_action()
            elif hasattr(self.algorithm, "explore"):  # deterministic actors (TD3, DDPG) add their own noise
                action = self.algorithm.explore(self.obs, self.generator)
            else:
                action, _ = self.policy.act(self.obs)
            action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
            next_obs, reward, terminated, truncated, info = env.step(action)
            finite &= torch.isfinite(next_obs).all() & torch.isfinite(reward).all()
            self.replay.extend(self.obs, action, reward, info["final_obs"], terminated, truncated)
            if self.observe is not None:
                self.observe(self.obs, action, terminated | truncated, info)
            returns.append(info["episode_return"])
            lengths.append(info["episode_length"])
            self.env_log.add(info)
            if "is_success" in info:  # goal tasks: success of the episode that ended (its last observation)
                successes.append(info["is_success"] & (terminated | truncated))
            self.obs = next_obs
            self.env_steps += env.num_envs * self.collective.world_size * getattr(env, "horizon", 1)
        if self.normalizer is not None:  # the phase's observations, before its updates sample them
            seen = torch.cat(seen)  # [train_freq x N, D]; a non-finite one stops the iteration
            if self.collective.world_size == 1:
                self.normalizer.update(seen)
            else:  # every rank's observations
                self.normalizer.merge(*self.collective.moments(seen.reshape(-1, self.normalizer.dim)))
        success = torch.stack(successes) if successes else None
        return torch.stack(returns), torch.stack(lengths), finite, success

    def iteration(self, progress: float) -> dict[str, float]:
        if self.iteration_count < self.offline_iterations:
            return self._offline_iteration(progress)
        returns, lengths, finite, successes, sums, counts = [], [], [], [], {}, {}
        self.env_log = EnvLog()
        for _ in range(self.phases_per_iteration):
            phase_returns, phase_lengths, phase_finite, phase_success = self.collect()
            returns.append(phase_returns)
            lengths.append(phase_lengths)
            finite.append(phase_finite)
            if phase_success is not None:
                successes.append(phase_success)
            self._update_phase(progress, sums, counts)
        self.iteration_count += 1
        # checked once per iteration, as on-policy: a failing iteration is never checkpointed
        if self.collective.any(not bool(torch.stack(finite).all())):  # any rank's: all stop together
            raise NonFiniteError(
                f"iteration {self.iteration_count}: non-finite observation or reward from env {self.env.env_id}"
            )
        values = {key: float(value) / counts[key] for key, value in self.collective.mean_dict(sums).items()}
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {name} ({value})")
        episode_length = torch.cat(lengths)  # [S, N] over the iteration's steps
        ended = episode_length > 0
        episode_return, episode_length = torch.cat(returns)[ended], episode_length[ended]
        if self.collective.world_size > 1:  # episodes that ended on any rank
            success = torch.cat(successes)[ended] if successes else None
            values |= self.env_log.values()
            return values | self.collective.episode_values(episode_return, episode_length, success)
        if episode_return.numel() > 0:
            values["episode_return"] = float(episode_return.mean())
            values["episode_length"] = float(episode_length.float().mean())
            if successes:
                values["success_rate"] = float(torch.cat(successes)[ended].float().mean())
        values["episodes"] = float(episode_return.numel())
        return values | self.env_log.values()

    def _offline_iteration(self, progress: float) -> dict[str, float]:
        """As many updates as an online iteration makes, on the replay as it is (the dataset), with no env step."""
        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        updates = 0
        for _ in range(self.phases_per_iteration):
            updates += self._updates(progress, sums, counts)
        self.iteration_count += 1
        values = {key: float(value) / counts[key] for key, value in self.collective.mean_dict(sums).items()}
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count} (offline): non-finite {name} ({value})")
        return values | {"offline_updates": float(self.iteration_count * updates)}

    def _update_phase(self, progress: float, sums: dict[str, torch.Tensor], counts: dict[str, int]) -> int:
        """``gradient_steps`` updates once warm-up is over; metrics summed into ``sums`` and counted per name in
        ``counts`` (an algorithm may report some only on some updates, as OGPO's policy metrics); returns the count."""
        if self.env_steps < self.schedule.learning_starts or self.replay.size < self.schedule.batch_size:
            return 0
        return self._updates(progress, sums, counts)

    def _updates(self, progress: float, sums: dict[str, torch.Tensor], counts: dict[str, int]) -> int:
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
                counts[key] = counts.get(key, 0) + 1
        return self.schedule.gradient_steps

    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "obs": self.obs,
            "generator": self.generator.get_state(),
            "iteration": self.iteration_count,
            "env_steps": self.env_steps,
            "normalizes_obs": self.normalizer is not None,  # absent in checkpoints from before the loop could
        }
        limit = self.schedule.save_buffer_limit_mb * 2**20
        if self.schedule.save_buffer and self.replay.nbytes <= limit:
            state["replay"] = self.replay.state_dict()
        if hasattr(self.env, "state_dict"):
            state["env"] = self.env.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if self.normalizer is not None and "normalizes_obs" not in state:
            raise ConfigError(
                "policy.normalize_obs=true: this checkpoint is from before the off-policy loop normalized "
                "observations (its policy never saw normalized inputs); resume it with policy.normalize_obs=false"
            )
        self.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.generator.set_state(state["generator"])
        self.iteration_count, self.env_steps = state["iteration"], state["env_steps"]
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        if state.get("env") is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self.obs = state["obs"].to(self.env.device)


def build_replay(schedule, gamma: float, env) -> ReplayBuffer:
    """The replay buffer ``schedule`` describes (size, sampler, n-step or hindsight) for discount ``gamma``.

    The loop feeds the policy's observation normalizer (when enabled) every observation it collects; the
    replay keeps raw observations, normalized by the networks with the current statistics when sampled.
    """
    from robopt.buffers.replay import ReplayStorage
    from robopt.buffers.samplers import PrioritizedSampler, UniformSampler

    per_env = max(1, -(-schedule.buffer_size // env.num_envs))
    storage = ReplayStorage(per_env, env.num_envs, env.obs_dim, env.action_dim, device=env.device)
    if schedule.sampler == "prioritized":
        sampler = PrioritizedSampler(
            storage.capacity, schedule.priority_alpha, schedule.priority_beta, device=env.device
        )
    else:
        sampler = UniformSampler(storage.capacity, device=env.device)
    transforms = replay_transforms(schedule, gamma, env)
    return ReplayBuffer(storage, sampler, transforms, gamma=gamma, batch_size=schedule.batch_size)


def check_replay_policy(policy) -> None:
    """Refuse a ``policy`` whose observation normalizer is enabled where no loop feeds it (the fleet's learner)."""
    if policy is not None and policy.normalizer.enabled:
        raise ConfigError(
            "policy.normalize_obs=true is not supported by the fleet yet (its learner does not update the "
            "normalizer); set policy.normalize_obs=false"
        )


def replay_transforms(schedule, gamma: float, env) -> tuple:
    """The sample-time transforms ``schedule`` asks for: hindsight relabelling, n-step returns, or none."""
    from robopt.buffers.transforms import NStep

    if schedule.her_strategy != "none":
        return (hindsight_transform(schedule, env),)
    return (NStep(schedule.n_step, gamma),) if schedule.n_step > 1 else ()


def hindsight_transform(schedule, env):
    """HER over the env's goal slices and vectorized ``compute_reward``, checked once on the reset observation."""
    from robopt.buffers.transforms import Hindsight

    if not hasattr(env, "compute_reward"):
        raise ConfigError(
            f"algo.loop.her_strategy={schedule.her_strategy} needs a goal-conditioned env (achieved and desired goals, "
            f"compute_reward), such as mujoco/GripperReach or mujoco/GripperPush; {env.env_id} has no goals"
        )
    obs = env.reset()  # [N, D]: the loop resets again with its seed
    reward = env.compute_reward(achieved_goal=obs[:, env.achieved_goal], desired_goal=obs[:, env.desired_goal])
    if not isinstance(reward, torch.Tensor) or tuple(reward.shape) != (env.num_envs,):
        shape = list(reward.shape) if isinstance(reward, torch.Tensor) else type(reward).__name__
        raise ConfigError(f"{env.env_id}: compute_reward must return one reward per row, [{env.num_envs}]; got {shape}")
    return Hindsight(env.compute_reward, env.achieved_goal, env.desired_goal, schedule.her_strategy, schedule.her_k)
