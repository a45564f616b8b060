"""DPPO (Ren et al. 2024, "Diffusion Policy Policy Optimization") on the shared on-policy loop and surrogate.

The denoising chain of a diffusion policy is an inner MDP whose steps are Gaussians (``robopt.policies.diffusion``);
DPPO is PPO's clipped surrogate over the per-denoising-step log-ratios, with the environment step's advantage.
What makes it DPPO is data handed to ``robopt.core.surrogates.surrogate``, not a new loss:

- minibatches are drawn over (environment step, denoising step) pairs: B env steps x K' steps of the rollout are
  shuffled together and each minibatch row is one pair (``DiffusionPolicy.pair_info``), so memory is bounded by
  the minibatch, not by B x K' network passes;
- the denoising discount weights step j (0 = the noisiest fine-tuned step) by ``gamma_denoise^(K' - j - 1)``;
- the clip range follows the denoising step, from ``clip_base`` at j = 0 to ``ratio.clip_low`` at j = K' - 1,
  eps_j = base + (clip - base) (exp(rate j / (K' - 1)) - 1) / (exp(rate) - 1) (constant when the two are equal);
- an optional behaviour-cloning regularizer (``bc_coef``): chains sampled by the frozen pretrained network at the
  minibatch's states are made likely under the fine-tuned one (DPPO's use_bc_loss);
- the actor and the value critic (on the environment state) have their own Adam and learning rate.

Defaults are those of the paper's public Gym (Hopper) fine-tuning configs: actor lr 1e-4, critic lr 1e-3,
clip 0.01 at every step, gamma_denoise 0.99, 5 epochs, target KL 1, no gradient clipping; K = 20 and K' = 10
are policy settings (``policy.denoising_steps``, ``policy.ft_steps``). The loop's advantages are GAE over the
environment steps (``rollout.*``), normalized over the rollout.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from robopt.algorithms.ppo import run_epochs
from robopt.buffers.rollout import RolloutBatch
from robopt.core.losses import explained_variance, value_error
from robopt.core.ratio_control import RatioControl
from robopt.core.schedules import SCHEDULES, make_schedule
from robopt.core.surrogates import ratio_metrics, surrogate
from robopt.core.updaters import FirstOrderUpdater
from robopt.distributed.collective import LOCAL, Collective
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class DPPORatioControl(RatioControl):
    """``RatioControl`` whose default clip range is DPPO's 0.01 (that of the last denoising step)."""

    clip_low: float = option(0.01, "clip: eps of the last denoising step (DPPO: 0.01); see algo.clip_base")


@dataclass(frozen=True)
class DPPOConfig:
    learning_rate: float = option(1e-4, "actor Adam learning rate")
    critic_learning_rate: float = option(1e-3, "critic Adam learning rate")
    lr_schedule: str = option("constant", "learning-rate schedule of both over training", SCHEDULES)
    epochs: int = option(5, "passes over each rollout's (env step, denoising step) pairs")
    minibatch_size: int = option(4096, "(env step, denoising step) pairs per gradient step")
    ratio: DPPORatioControl = option(DPPORatioControl(), "ratio control of the surrogate (algo.ratio.name=...)")
    clip_base: float = option(0.01, "clip range of the first fine-tuned (noisiest) denoising step")
    clip_rate: float = option(3.0, "exponential rate of the clip range from clip_base to ratio.clip_low over steps")
    gamma_denoise: float = option(0.99, "denoising discount: step j is weighted gamma_denoise^(K' - j - 1)")
    value_coef: float = option(0.5, "value loss coefficient")
    value_clip: float = option(0.0, "clip the value update around the old value (0 disables)")
    bc_coef: float = option(0.0, "behaviour-cloning regularizer toward the frozen pretrained chain (0 disables)")
    max_grad_norm: float = option(0.0, "global gradient-norm clip of each of actor and critic (0 disables)")
    target_kl: float = option(1.0, "stop the epochs when an epoch's approx KL exceeds 1.5x this (0 disables)")

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"epochs and minibatch_size must be >= 1, got {self.epochs}, {self.minibatch_size}")
        if self.learning_rate <= 0.0 or self.critic_learning_rate <= 0.0:
            raise ValueError(f"learning rates must be > 0, got {self.learning_rate}, {self.critic_learning_rate}")
        if not 0.0 < self.clip_base < 1.0:
            raise ValueError(f"clip_base must be in (0, 1), got {self.clip_base}")
        if not 0.0 < self.gamma_denoise <= 1.0:
            raise ValueError(f"gamma_denoise must be in (0, 1], got {self.gamma_denoise}")
        if self.bc_coef < 0.0 or self.max_grad_norm < 0.0 or self.target_kl < 0.0 or self.value_clip < 0.0:
            raise ValueError("bc_coef, max_grad_norm, target_kl and value_clip must be >= 0")


def denoising_weights(steps: int, gamma: float) -> torch.Tensor:
    """[K'] denoising discount gamma^(K' - j - 1): 1 for the step that makes the action."""
    return gamma ** torch.arange(steps - 1, -1, -1, dtype=torch.float32)


def clip_schedule(steps: int, base: float, final: float, rate: float) -> torch.Tensor:
    """[K'] clip range per denoising step, exponential from ``base`` (j = 0) to ``final`` (j = K' - 1)."""
    if steps == 1:
        return torch.tensor([final])
    fraction = torch.arange(steps, dtype=torch.float64) / (steps - 1)
    if rate == 0.0:
        shape = fraction
    else:
        shape = torch.expm1(rate * fraction) / math.expm1(rate)
    return (base + (final - base) * shape).to(torch.float32)


def dppo_loss(policy, critic, batch: RolloutBatch, rows, step, config: DPPOConfig, control, tables, with_metrics):
    """DPPO's loss on the pairs (``rows`` [b], ``step`` [b]) of ``batch`` (pure): surrogate + value (+ BC)."""
    weights, clips = tables
    info = policy.pair_info(batch.policy_info, rows, step)
    obs = batch.obs[rows]
    log_ratio = policy.log_ratio(obs, None, info)  # [b, 1]
    kl = policy.kl(obs, info) if control.name == "kl_penalty_adaptive" else None
    policy_loss, metrics = surrogate(
        log_ratio,
        batch.advantage[rows],
        control,
        weight=weights[step].unsqueeze(-1),
        kl=kl,
        with_metrics=with_metrics,
        clip_range=clips[step].unsqueeze(-1),
    )
    value = critic(batch.critic_input[rows])
    squared_error = value_error(
        value, batch.return_target[rows], batch.value[rows], config.value_clip if config.value_clip > 0 else None
    )
    loss = policy_loss + 0.5 * config.value_coef * squared_error
    if config.bc_coef > 0.0:
        bc_loss = policy.base_chain_nll(obs)
        loss = loss + config.bc_coef * bc_loss
        if with_metrics:
            metrics["bc_loss"] = bc_loss.detach()
    if with_metrics:
        metrics["value_loss"] = 0.5 * squared_error.detach()
        metrics["policy_loss"] = policy_loss.detach()
    return loss, metrics


class DPPO:
    """Epochs of shuffled (env step, denoising step) pair minibatches; actor and critic each with its own Adam."""

    def __init__(self, config: DPPOConfig, policy, critic) -> None:
        from robopt.policies.diffusion import DiffusionPolicy

        if not isinstance(policy, DiffusionPolicy):
            raise ConfigError(
                "algo.name=dppo needs policy.name=diffusion (its ratio is per denoising step), "
                f"got {type(policy).__name__}"
            )
        if config.ratio.name == "clip_asymmetric":
            raise ConfigError(
                "algo.ratio.name=clip_asymmetric: DPPO's clip range follows the denoising step (algo.clip_base to "
                "algo.ratio.clip_low) and is symmetric; use clip or dual_clip"
            )
        self.config, self.policy, self.critic = config, policy, critic
        max_norm = config.max_grad_norm if config.max_grad_norm > 0 else None
        self.actor_updater = FirstOrderUpdater(policy.parameters(), config.learning_rate, max_norm)
        self.critic_updater = FirstOrderUpdater(critic.parameters(), config.critic_learning_rate, max_norm)
        self.actor_schedule = make_schedule(config.lr_schedule, config.learning_rate)
        self.critic_schedule = make_schedule(config.lr_schedule, config.critic_learning_rate)
        steps = policy.config.ft_steps
        device = policy.ft_timesteps.device
        self.tables = (
            denoising_weights(steps, config.gamma_denoise).to(device),
            clip_schedule(steps, config.clip_base, config.ratio.clip_low, config.clip_rate).to(device),
        )
        self.control = config.ratio
        self.collective = LOCAL

    def use_collective(self, collective: Collective) -> None:
        """Data-parallel training: actor and critic gradients averaged over ranks at every minibatch step (each
        rank's minibatch is its share of the configured (env step, denoising step) pairs); the KL that stops the
        epochs or adapts the penalty is the ranks' mean."""
        self.collective = collective
        self.actor_updater.collective = collective
        self.critic_updater.collective = collective

    def _step(self, batch: RolloutBatch, rows, step, with_metrics: bool) -> dict[str, torch.Tensor]:
        loss, metrics = dppo_loss(
            self.policy, self.critic, batch, rows, step, self.config, self.control, self.tables, with_metrics
        )
        self.actor_updater.flat.grad.zero_()
        self.critic_updater.flat.grad.zero_()
        loss.backward()
        metrics["grad_norm"] = self.actor_updater.clip_and_step()
        metrics["critic_grad_norm"] = self.critic_updater.clip_and_step()
        metrics["loss"] = loss.detach()
        return metrics

    def update(self, batch: RolloutBatch, progress: float) -> dict[str, torch.Tensor]:
        config, steps = self.config, self.policy.config.ft_steps
        self.actor_updater.set_lr(self.actor_schedule(progress))
        self.critic_updater.set_lr(self.critic_schedule(progress))
        pairs = len(batch) * steps

        def epoch_steps(with_metrics: bool):
            for index in torch.randperm(pairs, device=batch.obs.device).split(config.minibatch_size):
                yield self._step(batch, index // steps, index % steps, with_metrics)

        metrics, epochs_run = run_epochs(config.epochs, config.target_kl, epoch_steps, self.collective)
        drift = self.collective.mean_dict(self._drift(batch))
        if self.control.name == "kl_penalty_adaptive":
            self.control = self.control.adapted(float(drift["approx_kl"]))
        return {
            **metrics,
            **{f"batch_{key}": value for key, value in drift.items()},
            "explained_variance": explained_variance(batch.value, batch.return_target),
            "epochs_run": torch.tensor(float(epochs_run)),
            "learning_rate": torch.tensor(self.actor_updater.lr),
            "critic_learning_rate": torch.tensor(self.critic_updater.lr),
        }

    @torch.no_grad()
    def _drift(self, batch: RolloutBatch, rows_per_pass: int = 4096) -> dict[str, torch.Tensor]:
        """Ratio drift over every (env step, denoising step) of the batch after the update, in row blocks."""
        log_ratio = torch.cat(
            [self.policy.log_ratio(part.obs, part.action, part.policy_info) for part in batch.split(rows_per_pass)]
        )
        return ratio_metrics(log_ratio)

    def state_dict(self) -> dict:
        return {
            "actor_optimizer": self.actor_updater.state_dict(),
            "critic_optimizer": self.critic_updater.state_dict(),
            "kl_coef": self.control.kl_coef,
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor_updater.load_state_dict(state["actor_optimizer"])
        self.critic_updater.load_state_dict(state["critic_optimizer"])
        self.control = dataclasses.replace(self.control, kl_coef=state["kl_coef"])
