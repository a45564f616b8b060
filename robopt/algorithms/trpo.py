"""TRPO (Schulman et al. 2015) on the shared on-policy loop: a surrogate through the trust-region updater.

Per update (the loop has already collected the rollout and computed GAE):

1. Actor: one natural-gradient step of the surrogate (``plain`` r A by default; any ``RatioControl`` may be
   used) under ``mean KL(pi_old || pi_new) <= max_kl``, through ``robopt.core.trust_region``.
2. Critic: ``critic_epochs`` passes of minibatched 0.5 (V - R)^2 with Adam (first-order updater).

Optional EnTRPO entropy regularization (Roostaie & Ebadzadeh 2021) adds to the advantage an entropy term
accumulated over the following time steps of the same episode, with the GAE discount:

    A'_t = A_t + alpha * sum_{l >= 0} (gamma lambda)^l H(pi(.|s_{t+l})),   cut where an episode ends,

which is the GAE of the entropy-augmented reward r_t + alpha H_t with the critic left on the task reward.

Shapes: T steps per env, N envs, B = T * N, K the policy's inner log-ratio axis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from robopt.buffers.rollout import RolloutBatch, critic_value
from robopt.core.losses import explained_variance, value_loss
from robopt.core.protocols import SupportsEntropy, SupportsKL, memory_width, require
from robopt.core.ratio_control import RATIO_CONTROLS, RatioControl
from robopt.core.schedules import SCHEDULES, make_schedule
from robopt.core.surrogates import masked_mean, surrogate
from robopt.core.trust_region import TrustRegionConfig, TrustRegionUpdater
from robopt.core.updaters import FirstOrderUpdater
from robopt.options import ConfigError, option
from robopt.policies.cells import write_out
from robopt.policies.recurrent import check_sequence_minibatch


@dataclass(frozen=True)
class TRPORatioControl(RatioControl):
    """``RatioControl`` whose default is TRPO's plain (unclipped) surrogate."""

    name: str = option("plain", "ratio control inside the trust region (plain = TRPO)", RATIO_CONTROLS)


@dataclass(frozen=True)
class TRPOConfig:
    max_kl: float = option(0.01, "trust-region bound delta on the mean KL(pi_old || pi_new) per update")
    damping: float = option(0.1, "Fisher damping lambda in (F + lambda I) s = g")
    cg_iterations: int = option(15, "conjugate-gradient iterations")
    line_search_steps: int = option(10, "backtracking line-search trials (full step included)")
    backtrack_ratio: float = option(0.8, "line-search shrink factor per trial")
    fisher_subsample: int = option(1, "use every k-th sample for Fisher-vector products (1 = all)")
    ratio: TRPORatioControl = option(TRPORatioControl(), "surrogate ratio control (algo.ratio.name=...)")
    critic_learning_rate: float = option(1e-3, "Adam learning rate of the critic (initial value of the schedule)")
    lr_schedule: str = option("constant", "critic learning-rate schedule over training", SCHEDULES)
    critic_epochs: int = option(10, "passes of the critic over each rollout")
    critic_minibatch_size: int = option(128, "samples per critic gradient step")
    max_grad_norm: float = option(0.5, "global gradient-norm clip of the critic (0 disables)")
    entropy_coef: float = option(0.0, "EnTRPO alpha: entropy accumulated over time added to the advantage")
    entropy_discount: float = option(0.9405, "EnTRPO accumulation discount; use rollout.gamma * rollout.gae_lambda")

    def __post_init__(self) -> None:
        if self.critic_epochs < 1 or self.critic_minibatch_size < 1 or self.fisher_subsample < 1:
            raise ValueError("critic_epochs, critic_minibatch_size and fisher_subsample must be >= 1")
        if self.entropy_coef < 0.0 or not 0.0 <= self.entropy_discount <= 1.0:
            raise ValueError(
                f"need entropy_coef >= 0, 0 <= entropy_discount <= 1; got {self.entropy_coef}, {self.entropy_discount}"
            )
        self.trust_region()  # validates max_kl, damping, cg_iterations, line_search_steps, backtrack_ratio

    def trust_region(self) -> TrustRegionConfig:
        return TrustRegionConfig(
            max_kl=self.max_kl,
            damping=self.damping,
            cg_iterations=self.cg_iterations,
            line_search_steps=self.line_search_steps,
            backtrack_ratio=self.backtrack_ratio,
        )


def entropy_to_go(entropy: torch.Tensor, episode_end: torch.Tensor, discount: float) -> torch.Tensor:
    """EnTRPO's accumulated entropy: E_t = H_t + discount (1 - end_t) E_{t+1}, E_T = 0 (discount = gamma lambda).

    Args:
        entropy: [T, N] H(pi(.|s_t)).
        episode_end: [T, N] bool, terminated or truncated at step t (the next row is a new episode).
        discount: gamma * lambda of the GAE advantage it is added to.

    Returns:
        [T, N] sum_{l >= 0} discount^l H_{t+l} within the episode and the rollout.
    """
    carry = discount * (~episode_end).to(entropy.dtype)  # [T, N]
    out = torch.empty_like(entropy)
    running = torch.zeros_like(entropy[0])  # [N]
    for t in range(entropy.shape[0] - 1, -1, -1):
        running = entropy[t] + carry[t] * running
        out[t] = running
    return out


class TRPO:
    """Trust-region actor step plus first-order critic epochs; plugs into ``OnPolicyLoop``."""

    def __init__(self, config: TRPOConfig, policy, critic) -> None:
        require(policy, SupportsKL, "TRPO", "the trust region bounds the closed-form mean KL to the acting policy")
        if not getattr(policy, "kl_available", True):
            raise ConfigError(
                "TRPO on a language policy needs its exact per-token KL: set policy.store_old_logits=true"
            )
        if config.entropy_coef > 0.0:
            require(policy, SupportsEntropy, "EnTRPO (entropy_coef > 0)", "the advantage gets H(pi(.|s))")
        self.config, self.policy, self.critic = config, policy, critic
        if memory_width(policy) > 0:
            self._check_recurrent(policy, config)
            write_out(policy)  # the Fisher-vector products differentiate the KL twice; the critic keeps the fused pass
        self.ratio: RatioControl = config.ratio
        self.actor_updater = TrustRegionUpdater(policy.parameters(), config.trust_region())
        max_norm = config.max_grad_norm if config.max_grad_norm > 0 else None
        self.critic_updater = FirstOrderUpdater(critic.parameters(), config.critic_learning_rate, max_norm)
        self.schedule = make_schedule(config.lr_schedule, config.critic_learning_rate)

    @staticmethod
    def _check_recurrent(policy, config: TRPOConfig) -> None:
        """What TRPO cannot do on a recurrent policy's sequence batch, as one-line errors."""
        if config.fisher_subsample > 1:
            raise ConfigError(
                f"algo.fisher_subsample={config.fisher_subsample} takes every k-th row, which cuts a recurrent "
                "policy's sequences; set algo.fisher_subsample=1"
            )
        if config.entropy_coef > 0.0:
            raise ConfigError(
                "EnTRPO (algo.entropy_coef > 0) needs the time-major rollout; a recurrent policy's batch "
                "is sequences: set algo.entropy_coef=0"
            )
        check_sequence_minibatch(policy, config.critic_minibatch_size, "algo.critic_minibatch_size")

    def use_collective(self, collective) -> None:
        """Data-parallel training: the actor's gradient, Fisher-vector products and line-search loss and KL, and
        every critic minibatch's gradient, are the ranks' means (each rank holds an equal share of the batch)."""
        self.actor_updater.collective = collective
        self.critic_updater.collective = collective

    def update(self, batch: RolloutBatch, progress: float) -> dict[str, torch.Tensor]:
        """One trust-region actor step on the whole batch, then the critic epochs. Returns scalar metrics."""
        metrics = self.actor_step(batch)
        self.critic_updater.set_lr(self.schedule(progress))
        metrics |= self.critic_epochs(batch)
        metrics["critic_learning_rate"] = self.schedule(progress)
        return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in metrics.items()}

    def advantage(self, batch: RolloutBatch) -> torch.Tensor:
        """GAE advantage [B], plus EnTRPO's accumulated entropy when ``entropy_coef > 0``."""
        if self.config.entropy_coef <= 0.0:
            return batch.advantage
        num_envs = batch.num_envs
        if num_envs == 0:
            raise ValueError("EnTRPO needs the time-major rollout batch (num_envs > 0), not a shuffled minibatch")
        with torch.no_grad():
            entropy = self.policy.entropy(batch.obs).reshape(-1, num_envs)  # [T, N]
        episode_end = (batch.terminated | batch.truncated).reshape(-1, num_envs)  # [T, N]
        bonus = entropy_to_go(entropy, episode_end, self.config.entropy_discount).reshape(-1)  # [B]
        return batch.advantage + self.config.entropy_coef * bonus

    def actor_step(self, batch: RolloutBatch) -> dict[str, float]:
        """The trust-region step of the surrogate on the whole batch; returns the updater's and ratio metrics."""
        policy, obs, action, info = self.policy, batch.obs, batch.action, batch.policy_info
        advantage = self.advantage(batch)  # [B]
        k = self.config.fisher_subsample
        sub_obs, sub_info = obs[::k], {key: value[::k] for key, value in info.items()}

        mask, sub_mask = info.get("mask"), sub_info.get("mask")  # a language policy's valid tokens [B, T]

        def loss_fn() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            kl = policy.kl(obs, info) if self.ratio.name == "kl_penalty_adaptive" else None  # exact KL [B]
            return surrogate(policy.log_ratio(obs, action, info), advantage, self.ratio, mask=mask, kl=kl)

        metrics = self.actor_updater.step(
            loss_fn,
            lambda: masked_mean(policy.kl(obs, info), mask),
            lambda: masked_mean(policy.kl(sub_obs, sub_info), sub_mask),
        )
        with torch.no_grad():
            _, ratio_metrics = loss_fn()
        measured_kl = metrics["kl"]
        self.ratio = self.ratio.adapted(measured_kl)  # kl_penalty_adaptive only; identity otherwise
        return {**metrics, **{k: float(v) for k, v in ratio_metrics.items()}}

    def critic_epochs(self, batch: RolloutBatch) -> dict[str, float]:
        """``critic_epochs`` passes of Adam minibatches on 0.5 (V - R)^2; returns mean loss, explained variance."""
        total, count = 0.0, 0
        for _ in range(self.config.critic_epochs):
            for minibatch in batch.minibatches(self.config.critic_minibatch_size):
                step = self.critic_updater.step(
                    lambda mb=minibatch: value_loss(critic_value(self.critic, mb), mb.return_target)
                )
                total, count = total + step["value_loss"], count + 1
        with torch.no_grad():  # of the updated critic over the whole batch
            explained = explained_variance(critic_value(self.critic, batch), batch.return_target)
        return {"value_loss": float(total / count), "explained_variance": float(explained)}

    def state_dict(self) -> dict:
        return {"critic_optimizer": self.critic_updater.state_dict(), "kl_coef": self.ratio.kl_coef}

    def load_state_dict(self, state: dict) -> None:
        self.critic_updater.load_state_dict(state["critic_optimizer"])
        self.ratio = dataclasses.replace(self.ratio, kl_coef=state["kl_coef"])
