"""The one on-policy loop: collect a rollout, estimate advantages, hand the batch to an algorithm's update.

Shapes: T steps per env, N envs, B = T * N, D obs dim, A action dim, P privileged dim.
PPO, TRPO (and later FPO, DPPO) differ only in the ``OnPolicyAlgorithm.update`` they plug in; the loop
never calls ``log_prob``. Everything stays on ``env.device``; metrics are reduced once per iteration.

``privileged=True`` (an asymmetric actor-critic, Pinto et al. 2018): the critic sees cat(obs, privileged) with
the env's ``privileged_obs()`` [N, P] (its randomized parameters), truncated rows bootstrap from
V(final_obs, info["final_privileged_obs"]); the policy sees obs only.

A recurrent policy (``policy.recurrent``) acts through a ``PolicyActor`` that carries its state [N, M] across steps
and iterations and zeroes it where an episode starts; its info keeps the state and the starts. Its recurrent critic's
values come from one pass over the whole rollout from the critic's state at the rollout's start, which also gives
the state at each row; the batch is then reordered into sequences of L steps (``RolloutBatch.as_sequences``).

Variants hook in at fixed points (``LoopHooks``: ``begin_iteration``, ``observe`` after each env step,
``advantages`` in place of GAE, ``complete`` once the batch is made, ``metrics``, and ``check_data_parallel`` when
the run has several ranks). The loop's own hooks do nothing; a variant's come from where its run is built (a
language run's group-relative advantages, DAPO's dynamic sampling and task counters: ``robopt.llm``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch

from robopt.buffers.rollout import RolloutBatch, RolloutStorage
from robopt.core.advantages import bootstrap_value, gae, normalize_advantage
from robopt.core.errors import NonFiniteError
from robopt.core.normalization import RewardScaler
from robopt.core.protocols import Policy, VecEnv, memory_width
from robopt.core.shapes import check_shape
from robopt.distributed.collective import LOCAL, Collective
from robopt.envs.episode_stats import EnvLog
from robopt.options import ConfigError, option
from robopt.policies.recurrent import PolicyActor, check_sequence_length

__all__ = ["LoopHooks", "NonFiniteError", "OnPolicyAlgorithm", "OnPolicyLoop", "RolloutConfig"]


@dataclass(frozen=True)
class RolloutConfig:
    num_steps: int = option(2048, "steps collected per env per iteration T (batch = T * N)")
    gamma: float = option(0.99, "discount factor")
    gae_lambda: float = option(0.95, "GAE lambda")
    normalize_advantage: bool = option(
        True, "normalize advantages to zero mean, unit std per batch (a variant's advantages too, after its refill)"
    )
    normalize_reward: bool = option(False, "scale rewards by the running std of the discounted return")


class OnPolicyAlgorithm(Protocol):
    """What an on-policy algorithm plugs into the loop."""

    def update(self, batch: RolloutBatch, progress: float) -> dict[str, torch.Tensor]:
        """Improve policy/critic on ``batch``; ``progress`` in [0, 1] drives schedules. Returns scalar metrics."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class LoopHooks:
    """The loop's hook points, each doing nothing: what a plain (robot) run uses. A variant passes an object with the
    same methods (``robopt.llm.group_sampling``'s group sampling and task counters)."""

    def begin_iteration(self) -> None:
        """Before the iteration's rollout."""

    def observe(self, env_info: dict) -> None:
        """After each env step, with the step's info."""

    def advantages(self, loop: OnPolicyLoop, critic_input: torch.Tensor) -> RolloutBatch | None:
        """The batch with this variant's advantages, in place of GAE's; None: GAE."""
        return None

    def complete(self, loop: OnPolicyLoop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        """The batch the update gets, once the rollout's is made; a variant may add rollouts (their episode returns
        and lengths go into ``returns`` and ``lengths``)."""
        return batch

    def metrics(self) -> dict[str, float]:
        """The variant's values for the iteration's row."""
        return {}

    def check_data_parallel(self) -> None:
        """Called when the run has several ranks: a one-line ConfigError for what the variant cannot do there."""


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside (0: unchanged), restored after."""
    before = torch.get_num_threads()
    if threads <= 0 or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class OnPolicyLoop:
    """Owns the env, the current observation and the rollout storage; one call to ``iteration`` = one update."""

    def __init__(
        self,
        env: VecEnv,
        policy: Policy,
        critic: torch.nn.Module,
        algorithm: OnPolicyAlgorithm,
        rollout: RolloutConfig,
        seed: int = 0,
        critic_warmup: int = 0,
        privileged: bool = False,
        update_policy_normalizer: bool = True,
        collective: Collective = LOCAL,
        hooks: LoopHooks | None = None,
        update_threads: int = 0,
    ) -> None:
        if update_threads < 0:
            raise ConfigError(f"update_threads must be >= 0 (0: as torch_threads), got {update_threads}")
        self.update_threads = update_threads  # intra-op threads of the update (0: those of collection)
        self.env, self.policy, self.critic, self.algorithm, self.rollout = env, policy, critic, algorithm, rollout
        self.collective = collective  # data-parallel: this rank's envs are one share of the run's
        self.hooks = LoopHooks() if hooks is None else hooks  # a variant's (group sampling), or none
        if collective.world_size > 1:
            self._check_data_parallel(algorithm, critic_warmup)
        self.critic_warmup = critic_warmup  # first iterations fit the critic only (a pretrained actor stays frozen)
        if hasattr(policy, "freeze_base") and not bool(policy.base_frozen):
            # diffusion: the first K - K' denoising steps keep the network RL starts from (its log_ratio covers
            # only the last K'); a resumed run's checkpoint then loads its own frozen copy
            policy.freeze_base()
        self._warmup_optimizer = None
        self.privileged = privileged
        # False when fine-tuning a pretrained policy: its input statistics stay those it was trained under
        self.update_policy_normalizer = update_policy_normalizer
        privileged_dim = env.privileged_dim if privileged else 0
        if privileged and privileged_dim < 1:
            raise ValueError(f"{env.env_id}: a privileged critic needs env.privileged_dim > 0, got {privileged_dim}")
        self.storage = RolloutStorage(
            rollout.num_steps, env.num_envs, env.obs_dim, env.action_dim, env.device, privileged_dim
        )
        self.reward_scaler = RewardScaler(env.num_envs, rollout.gamma).to(env.device)
        self.actor = PolicyActor(policy, env.num_envs)  # a recurrent policy's state; memoryless: act straight through
        self.critic_state = critic.initial_state(env.num_envs) if memory_width(critic) > 0 else None
        if self.actor.recurrent:
            self._check_recurrent(rollout, critic_warmup)
        self.obs = env.reset(seed=seed)  # [N, D]
        self.iteration_count = 0
        self.env_steps = 0
        self.env_log = EnvLog()

    @property
    def steps_per_iteration(self) -> int:
        """Env steps per iteration: T x N decisions, each H env steps for an action-chunk env (H = ``horizon``),
        summed over the ranks of a data-parallel run."""
        steps = self.rollout.num_steps * self.env.num_envs * getattr(self.env, "horizon", 1)
        return steps * self.collective.world_size

    @torch.inference_mode()
    def collect(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fill the storage with T steps; returns (episode returns, episode lengths) of episodes that ended."""
        storage, env = self.storage, self.env
        if self.actor.policy is not self.policy:  # the policy was replaced (a script, a test's replay policy)
            self.actor = PolicyActor(self.policy, env.num_envs)
        actor = self.actor
        ended_return, ended_length = [], []  # T tensors of [N]
        self.env_log = env_log = EnvLog()
        observe = self.hooks.observe
        obs, privileged = self.obs, None
        for t in range(storage.num_steps):
            action, info = actor.act(obs)  # [N, A]; values are computed for the whole rollout at once later
            env_action = torch.clamp(action, env.action_low, env.action_high)
            if self.privileged:  # those of obs: read before the step (which may reset rows and redraw them)
                privileged = env.privileged_obs()  # [N, P], a fresh tensor
            next_obs, reward, terminated, truncated, env_info = env.step(env_action)
            if t == 0:  # data crosses modules here: check the contract once per rollout
                self._check_step_shapes(action, next_obs, reward, terminated, truncated)
            storage.insert(
                t,
                obs,
                action,
                info,
                reward,
                terminated,
                truncated,
                env_info["final_obs"],
                privileged,
                env_info.get("final_privileged_obs"),
            )
            observe(env_info)
            if actor.recurrent:  # the rows whose next step starts an episode (a memoryless policy needs nothing)
                actor.episode_ended(terminated | truncated)
            ended_return.append(env_info["episode_return"])
            ended_length.append(env_info["episode_length"])
            env_log.add(env_info)
            obs = next_obs
        self.obs = obs
        storage.commit()
        if self.rollout.normalize_reward:  # the whole rollout at once: same numbers as per step, far cheaper
            collective = self.collective if self.collective.world_size > 1 else None
            storage.reward.copy_(self.reward_scaler(storage.reward, storage.terminated | storage.truncated, collective))
        episode_return, episode_length = torch.stack(ended_return), torch.stack(ended_length)  # [T, N]
        ended = episode_length > 0
        return episode_return[ended], episode_length[ended]

    @torch.no_grad()
    def advantages(self) -> RolloutBatch:
        """GAE over the filled storage, bootstrapping truncated rows from V(final_obs).

        V(s_t) for the whole rollout is one batched critic pass here rather than T small ones while acting.
        A privileged critic reads cat(obs, privileged) throughout: the env's current values for the last obs,
        ``final_privileged_obs`` for truncated rows.
        """
        storage, rollout = self.storage, self.rollout
        steps, num_envs = storage.value.shape
        critic_input = storage.critic_input()  # [T, N, D (+ P)]
        last_input = torch.cat((self.obs, self.env.privileged_obs()), dim=-1) if self.privileged else self.obs
        truncated_rows = storage.truncated.nonzero(as_tuple=True)
        final_value = torch.zeros_like(storage.value)  # [T, N]
        if self.critic_state is not None:
            critic_state, last_value = self._recurrent_values(critic_input, last_input, truncated_rows, final_value)
        else:
            critic_state = None
            value = self.critic(critic_input.reshape(steps * num_envs, -1))  # [T * N]
            check_shape("critic value", value, (steps * num_envs,))
            storage.value.copy_(value.reshape(steps, num_envs))
            last_value = self.critic(last_input)  # [N]
            if truncated_rows[0].numel() > 0:
                final_value[truncated_rows] = self.critic(storage.final_critic_input(truncated_rows))
        batch = self.hooks.advantages(self, critic_input)  # a variant's advantages (group-relative), or None: GAE
        if batch is not None:
            return batch
        next_value = bootstrap_value(storage.value, last_value, final_value, storage.terminated, storage.truncated)
        advantage, return_target = gae(
            storage.reward,
            storage.value,
            next_value,
            storage.terminated,
            storage.truncated,
            rollout.gamma,
            rollout.gae_lambda,
        )
        if rollout.normalize_advantage:
            advantage = self.normalize_advantage(advantage)
        batch = storage.flatten(advantage, return_target, critic_input)
        if self.actor.recurrent:
            return batch.as_sequences(self.policy.sequence_length, critic_state)
        return batch

    def _recurrent_values(self, critic_input, last_input, truncated_rows, final_value):
        """A recurrent critic's V over the rollout in one pass from its state at the rollout's start: fills the
        storage's values and ``final_value`` [T, N] of truncated rows (the final obs after the state of that step);
        returns the state at each row [T, N, M] and V [N] of the obs after the rollout. The critic's state moves on
        to the one after the rollout."""
        starts = self.storage.policy_info["episode_start"]  # [T, N]
        value, before, after = self.critic.rollout(critic_input, self.critic_state, starts)
        self.storage.value.copy_(value)
        if truncated_rows[0].numel() > 0:
            final_input = self.storage.final_critic_input(truncated_rows)
            final_value[truncated_rows] = self.critic.value_step(final_input, after[truncated_rows])
        self.critic_state = after[-1]
        next_start = self.actor.episode_start.unsqueeze(-1)  # rows whose next step starts an episode
        last_state = torch.where(next_start, torch.zeros_like(self.critic_state), self.critic_state)
        return before, self.critic.value_step(last_input, last_state)

    def _check_recurrent(self, rollout: RolloutConfig, critic_warmup: int) -> None:
        """What a recurrent policy needs of the rollout, as one-line errors."""
        check_sequence_length(self.policy.sequence_length, rollout.num_steps)
        if critic_warmup > 0:
            raise ConfigError("critic_warmup fits a memoryless critic; with policy.recurrent set critic_warmup=0")
        if self.critic_state is None:
            raise ConfigError("a recurrent policy needs the recurrent critic robopt builds for it (build_critic)")

    def normalize_advantage(self, advantage: torch.Tensor) -> torch.Tensor:
        """Zero mean, unit std over the batch: this rank's, or in a data-parallel run every rank's rows."""
        if self.collective.world_size == 1:
            return normalize_advantage(advantage)
        mean, std = self.collective.mean_std(advantage)
        return (advantage - mean) / (std + 1e-8)

    def iteration(self, progress: float) -> dict[str, float]:
        """Collect, estimate advantages, update, then refresh the normalizers. Returns metrics as floats."""
        self.hooks.begin_iteration()
        try:
            episode_return, episode_length = self.collect()
        except NonFiniteError as error:
            raise NonFiniteError(f"iteration {self.iteration_count + 1}: {error}") from None
        self.iteration_count += 1
        self.env_steps += self.steps_per_iteration
        self.check_rollout_finite()
        returns, lengths = [episode_return], [episode_length]  # a variant may add rollouts (DAPO's refill)
        batch = self.hooks.complete(self, self.advantages(), returns, lengths)
        episode_return, episode_length = torch.cat(returns), torch.cat(lengths)
        if len(batch) == 0:  # a variant left no rows (dynamic sampling dropped every group): nothing to learn
            metrics = {}
        elif self.iteration_count <= self.critic_warmup:
            metrics = self.warm_up_critic(batch)
        else:
            with intra_op_threads(self.update_threads):
                metrics = self.algorithm.update(batch, progress)
        values = {k: float(v) for k, v in self.collective.mean_dict(metrics).items()}
        values.update(self.hooks.metrics())
        values.update(self.env_log.values())
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {name} ({value})")
        # The statistics a rollout was collected with are the ones its update saw; refresh them only now.
        if self.update_policy_normalizer and len(batch) > 0:
            self._update_normalizer(self.policy.normalizer, batch.obs)
        if len(batch) > 0:
            self._update_normalizer(self.critic.normalizer, batch.critic_input)
        if self.collective.world_size > 1:  # episodes that ended on any rank
            return values | self.collective.episode_values(episode_return, episode_length)
        if episode_return.numel() > 0:
            values["episode_return"] = float(episode_return.mean())
            values["episode_length"] = float(episode_length.float().mean())
        values["episodes"] = float(episode_return.numel())
        return values

    def _update_normalizer(self, normalizer, x: torch.Tensor) -> None:
        """Merge the rows of ``x`` into ``normalizer``: this rank's, or in a data-parallel run every rank's."""
        if self.collective.world_size == 1:
            normalizer.update(x)
        elif normalizer.enabled:
            normalizer.merge(*self.collective.moments(x.reshape(-1, normalizer.dim)))

    def _check_data_parallel(self, algorithm, critic_warmup: int) -> None:
        """What several ranks support, refused with one line otherwise; the algorithm is handed the collective."""
        if not hasattr(algorithm, "use_collective"):
            raise ConfigError(
                f"{type(algorithm).__name__} runs in one process; data-parallel training supports PPO, FPO, TRPO "
                "and DPPO (launch without torchrun / --nproc)"
            )
        self.hooks.check_data_parallel()
        if critic_warmup > 0:
            raise ConfigError("critic_warmup runs in one process; set critic_warmup=0 or launch without --nproc")
        algorithm.use_collective(self.collective)

    def warm_up_critic(self, batch: RolloutBatch, epochs: int = 10, minibatch_size: int = 256) -> dict:
        """Fit V to the batch's GAE return targets with the actor untouched (a separate Adam, lr 1e-3).

        The algorithm's updater owns the critic's storage (parameters and gradients are views of its flat
        buffers), so this optimizer writes in place and zeroes gradients without replacing them.
        """
        from robopt.core.losses import value_error

        if self._warmup_optimizer is None:
            self._warmup_optimizer = torch.optim.Adam(self.critic.parameters(), lr=1e-3, eps=1e-5)
        params = list(self.critic.parameters())
        obs, target = batch.critic_input, batch.return_target
        for _ in range(epochs):
            for rows in torch.randperm(obs.shape[0], device=obs.device).split(minibatch_size):
                self._warmup_optimizer.zero_grad(set_to_none=False)
                loss = 0.5 * value_error(self.critic(obs[rows]), target[rows])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 0.5)
                self._warmup_optimizer.step()
        self._warmup_optimizer.zero_grad(set_to_none=False)
        return {"value_loss": loss.detach(), "critic_warmup": torch.tensor(1.0)}

    def _check_step_shapes(self, action, obs, reward, terminated, truncated) -> None:
        n, env = self.env.num_envs, self.env
        check_shape("policy.act action", action, (n, env.action_dim))
        check_shape(f"{env.env_id} observation", obs, (n, env.obs_dim))
        for name, tensor in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
            check_shape(f"{env.env_id} {name}", tensor, (n,))
        if terminated.dtype != torch.bool or truncated.dtype != torch.bool:
            raise TypeError(f"{env.env_id}: terminated/truncated must be bool tensors, got {terminated.dtype}")

    def check_rollout_finite(self) -> None:
        """A NonFiniteError naming the source when the stored rollout holds a non-finite observation or reward."""
        self._check_finite("observation", self.storage.obs)
        self._check_finite("reward", self.storage.reward)

    def _check_finite(self, source: str, tensor: torch.Tensor) -> None:
        # any rank's: every rank stops at the same point rather than one waiting on the others' next collective
        if self.collective.any(not bool(torch.isfinite(tensor).all())):
            raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {source} from env {self.env.env_id}")

    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "obs": self.obs,
            "iteration": self.iteration_count,
            "env_steps": self.env_steps,
        }
        if self.actor.recurrent:  # the memories carried across iterations: a resume continues them exactly
            state["memory"] = {"actor": self.actor.state_dict(), "critic": self.critic_state}
        if hasattr(self.env, "state_dict"):
            state["env"] = self.env.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self.iteration_count, self.env_steps = state["iteration"], state["env_steps"]
        if self.actor.recurrent and "memory" in state:
            self.actor.load_state_dict(state["memory"]["actor"])
            self.critic_state = state["memory"]["critic"].to(self.critic_state.device)
        if state.get("env") is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self.obs = state["obs"].to(self.env.device)
