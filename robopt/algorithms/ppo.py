"""PPO (Schulman et al. 2017) as a config, a pure loss and an update plugged into the on-policy loop.

Shapes: B minibatch, K the policy's inner log-ratio axis, D obs dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.buffers.rollout import RolloutBatch
from robopt.config import option
from robopt.core.losses import value_loss
from robopt.core.schedules import SCHEDULES, make_schedule
from robopt.core.surrogates import clipped_surrogate
from robopt.core.updaters import FirstOrderUpdater


@dataclass(frozen=True)
class PPOConfig:
    learning_rate: float = option(3e-4, "Adam learning rate (initial value of the schedule)")
    lr_schedule: str = option("linear", "learning-rate schedule over training", SCHEDULES)
    epochs: int = option(10, "passes over each rollout")
    minibatch_size: int = option(64, "samples per gradient step")
    clip_low: float = option(0.2, "ratio clip below 1 (1 - clip_low)")
    clip_high: float = option(0.2, "ratio clip above 1 (1 + clip_high); > clip_low is 'clip-higher'")
    value_clip: float = option(0.0, "clip the value update around the old value (0 disables)")
    value_coef: float = option(0.5, "value loss coefficient")
    entropy_coef: float = option(0.0, "entropy bonus coefficient")
    max_grad_norm: float = option(0.5, "global gradient-norm clip")
    target_kl: float = option(0.0, "stop the epochs early when the epoch's approx KL exceeds 1.5x this (0 disables)")

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"epochs and minibatch_size must be >= 1, got {self.epochs}, {self.minibatch_size}")
        if not (0.0 < self.clip_low < 1.0) or self.clip_high <= 0.0:
            raise ValueError(f"need 0 < clip_low < 1 and clip_high > 0, got {self.clip_low}, {self.clip_high}")


def ppo_loss(
    policy, critic, batch: RolloutBatch, config: PPOConfig
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate + value_coef * value loss - entropy_coef * entropy, on one minibatch (pure)."""
    log_ratio = policy.log_ratio(batch.obs, batch.action, batch.policy_info)  # [B, K]
    policy_loss, metrics = clipped_surrogate(log_ratio, batch.advantage, config.clip_low, config.clip_high)
    value = critic(batch.obs)  # [B]
    critic_loss, value_metrics = value_loss(
        value, batch.return_target, batch.value, config.value_clip if config.value_clip > 0 else None
    )
    loss = policy_loss + config.value_coef * critic_loss
    if config.entropy_coef > 0.0:
        entropy = policy.entropy(batch.obs).mean()
        loss = loss - config.entropy_coef * entropy
        metrics["entropy"] = entropy.detach()
    return loss, {**metrics, **value_metrics, "policy_loss": policy_loss.detach()}


class PPO:
    """Epochs x minibatches of ``ppo_loss`` through one first-order updater over policy and critic."""

    def __init__(self, config: PPOConfig, policy, critic) -> None:
        self.config, self.policy, self.critic = config, policy, critic
        params = list(policy.parameters()) + list(critic.parameters())
        self.updater = FirstOrderUpdater(params, config.learning_rate, config.max_grad_norm)
        self.schedule = make_schedule(config.lr_schedule, config.learning_rate)

    def update(self, batch: RolloutBatch, progress: float) -> dict[str, torch.Tensor]:
        config = self.config
        learning_rate = self.schedule(progress)
        self.updater.set_lr(learning_rate)
        epoch_metrics: list[dict[str, torch.Tensor]] = []
        for _ in range(config.epochs):
            sums: dict[str, torch.Tensor] = {}
            count = 0
            for minibatch in batch.minibatches(config.minibatch_size):
                metrics = self.updater.step(lambda mb=minibatch: ppo_loss(self.policy, self.critic, mb, config))
                for key, value in metrics.items():
                    sums[key] = sums[key] + value if key in sums else value
                count += 1
            epoch_metrics.append({k: v / count for k, v in sums.items()})
            if config.target_kl > 0.0 and float(epoch_metrics[-1]["approx_kl"]) > 1.5 * config.target_kl:
                break
        last = epoch_metrics[-1]
        return {**last, "epochs_run": torch.tensor(float(len(epoch_metrics))), "learning_rate": torch.tensor(learning_rate)}

    def state_dict(self) -> dict:
        return {"optimizer": self.updater.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.updater.load_state_dict(state["optimizer"])
