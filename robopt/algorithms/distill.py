"""Teacher-student distillation (``algo.name: distill``): a student that sees only what a robot's own sensors give
learns to act as a privileged teacher does, DAgger-style (Ross et al. 2011; rsl_rl's ``Distillation``, Isaac Lab's
distillation configs).

Shapes: T rollout steps, N envs, D the student's observation, D' the teacher's, A action dim.

Each iteration the student drives the env for T steps with its own mean action (so it visits the states its own
mistakes lead to), while the teacher, frozen, labels every state with its deterministic action computed from its own
observation (``robopt.envs.robot.teacher_view``: the teacher run's observation terms on the same state and command).
Then ``epochs`` passes of minibatch regression: mean over rows of ||mu_student(s) - a_teacher||^2 (``loss: mse``) or
the Huber loss (``huber``, delta 1). The student's observation normalizer is refreshed from each rollout after its
update, as PPO's loop does; the teacher's stays as it was trained.

The teacher comes from ``teacher_from`` (a run directory), loaded by the build layer (``robopt.warm_start.
load_teacher``), which also checks that it is a run of the same robot and task (one line saying what differs) and
that the student observes only what a robot computer can compute (terms with a deploy source: no height scan). The
student is a memoryless Gaussian policy, with a history window if it needs memory (``policy.history``); a recurrent
student is refused for now. Afterwards ``robopt train ... init_from=<this run>`` fine-tunes it with PPO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from robopt.core.errors import NonFiniteError
from robopt.core.protocols import memory_width
from robopt.core.updaters import FirstOrderUpdater
from robopt.envs.episode_stats import EnvLog
from robopt.options import AT_LEAST_ONE, POSITIVE, ConfigError, option

LOSSES = ("mse", "huber")


@dataclass(frozen=True)
class DistillConfig:
    teacher_from: str = option("", "the teacher's run directory (a run of the same robot and task); required")
    num_steps: int = option(24, "env steps per row per iteration (the student acts)", check=AT_LEAST_ONE)
    epochs: int = option(5, "regression passes over each rollout", check=AT_LEAST_ONE)
    minibatch_size: int = option(4096, "rows per gradient step", check=AT_LEAST_ONE)
    learning_rate: float = option(1e-3, "Adam learning rate", check=POSITIVE)
    max_grad_norm: float = option(1.0, "global gradient-norm clip", check=POSITIVE)
    loss: str = option("mse", "regression of the student's mean action on the teacher's: mse or huber", LOSSES)


class DistillLoop:
    """The student's rollouts with the teacher's labels, then regression (the module doc); ``set_teacher`` before
    the first ``iteration``."""

    def __init__(self, config: DistillConfig, env, policy, seed: int = 0, env_id: str = "") -> None:
        if not hasattr(policy, "distribution_params") or memory_width(policy) > 0:
            raise ConfigError(
                "algo.name=distill trains a memoryless Gaussian student (policy.name=gaussian; policy.history=K for "
                "a window of past steps); a recurrent student is not supported yet"
            )
        if not config.teacher_from:
            raise ConfigError("algo.teacher_from is empty: name the teacher's run directory")
        self.config, self.env, self.policy = config, env, policy
        self.teacher = self.view = None
        self.updater = FirstOrderUpdater(policy.parameters(), config.learning_rate, config.max_grad_norm)
        self.generator = torch.Generator(device=env.device).manual_seed(seed)
        self.obs = env.reset(seed=seed)
        self.iteration_count, self.env_steps = 0, 0

    def set_teacher(self, teacher: torch.nn.Module, view) -> None:
        """The frozen teacher policy and its observation view of the env (``robopt.envs.robot.teacher_view``)."""
        for parameter in teacher.parameters():
            parameter.requires_grad_(False)
        self.teacher, self.view = teacher.eval(), view

    @property
    def steps_per_iteration(self) -> int:
        return self.config.num_steps * self.env.num_envs * getattr(self.env, "horizon", 1)

    @torch.no_grad()
    def collect(self) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """T steps of the student's mean action: (obs [T * N, D], teacher actions [T * N, A], episode statistics)."""
        env, steps = self.env, self.config.num_steps
        observations, labels, returns, lengths = [], [], [], []
        env_log = EnvLog()
        obs = self.obs
        for _ in range(steps):
            teacher_action, _ = self.teacher.act(self.view.observe(), deterministic=True)
            action, _ = self.policy.act(obs, deterministic=True)
            observations.append(obs)
            labels.append(teacher_action)
            obs, _, terminated, truncated, info = env.step(torch.clamp(action, env.action_low, env.action_high))
            done = terminated | truncated
            returns.append(info["episode_return"][done])
            lengths.append(info["episode_length"][done])
            env_log.add(info)
        self.obs = obs
        ended_return, ended_length = torch.cat(returns), torch.cat(lengths)
        stats = env_log.values() | {"episodes": float(ended_return.numel())}
        if ended_return.numel() > 0:
            stats["episode_return"] = float(ended_return.mean())
            stats["episode_length"] = float(ended_length.float().mean())
        return torch.cat(observations), torch.cat(labels), stats

    def _loss(self, obs: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict]:
        mean, _ = self.policy.distribution_params(obs)
        if self.config.loss == "huber":
            return torch.nn.functional.huber_loss(mean, target, reduction="none").sum(-1).mean(), {}
        return (mean - target).square().sum(-1).mean(), {}

    def iteration(self, progress: float) -> dict[str, float]:
        if self.teacher is None:
            raise ConfigError("algo.name=distill has no teacher: the build layer loads it from algo.teacher_from")
        obs, target, stats = self.collect()
        losses = []
        for _ in range(self.config.epochs):
            order = torch.randperm(obs.shape[0], device=obs.device, generator=self.generator)
            for rows in order.split(self.config.minibatch_size):
                metrics = self.updater.step(lambda o=obs[rows], a=target[rows]: self._loss(o, a))
                losses.append(metrics["loss"])
        self.policy.normalizer.update(obs)  # after the update, as the statistics the rollout saw were the old ones
        self.iteration_count += 1
        self.env_steps += self.steps_per_iteration
        last_epoch = losses[-math.ceil(obs.shape[0] / self.config.minibatch_size) :]
        values = {"distill_loss": float(torch.stack(last_epoch).mean())}  # the last epoch's mean
        values["grad_norm"] = float(metrics["grad_norm"])
        values |= stats
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {name} ({value})")
        return values

    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "optimizer": self.updater.state_dict(),
            "generator": self.generator.get_state(),
            "obs": self.obs,
            "iteration": self.iteration_count,
            "env_steps": self.env_steps,
            "teacher_noise": self.view.view.step_generator.get_state() if self.view is not None else None,
        }
        if hasattr(self.env, "state_dict"):
            state["env"] = self.env.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.updater.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.iteration_count, self.env_steps = int(state["iteration"]), int(state["env_steps"])
        if state.get("teacher_noise") is not None and self.view is not None:
            self.view.view.step_generator.set_state(state["teacher_noise"])
        if state.get("env") is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self.obs = state["obs"].to(self.env.device)
