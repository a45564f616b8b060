"""OGPO, off-policy generative policy optimization (``algo.name: ogpo``; Patil, Nakamoto et al. 2026): a diffusion
policy's whole fine-tuned denoising chain trained by PPO's clipped objective, with off-policy critics as the
terminal reward, on the off-policy loop.

Shapes: B replay batch, S states of a policy update, M sampled actions per state, C critics, K' fine-tuned
denoising steps.

One update on a replay batch (s, a, r, s', d):

- critics: a' ~ pi(s') (a full stochastic chain), y = k r + gamma (1 - d) min_c Q'_c(s', a'),
  L_Q = sum_c mean_B (Q_c(s, a) - y)^2, Polyak averaging of Q';
- policy (every ``policy_every`` updates, after ``policy_starts``): at the batch's first S states, M chains
  a_m ~ pi_old(s) with their per-step log-probabilities (``DiffusionPolicy.act``); the advantage of each is its
  critics' value against the mean over the M samples (``robopt.core.q_losses.sampled_advantage``: two-sided
  conservative across critics, divided by the per-state std); then ``policy_epochs`` gradient steps of the shared
  clipped ``surrogate`` over the S x M x K' (sample, denoising step) log-ratios, DPPO's denoising discount and
  per-step clip range applied, no fresh env return used;
- success-buffer regularizer (``success_coef`` > 0): + coef x the policy's imitation (noise-regression) loss on
  (s, a) pairs of the run's own successful episodes (``robopt.algorithms.success_buffer``).

Where the paper's text was not available here, robopt's reading (docs/offline.md says which): the two-sided
conservative advantage and the Q-variance reduction are implemented as described above; the success criterion of
a task without ``is_success`` is an episode return threshold (``success_return``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from robopt.algorithms.dppo import DPPORatioControl, clip_schedule, denoising_weights
from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_updates import NamedState, check_rates, optimizer_step, q_critics
from robopt.algorithms.success_buffer import SuccessBuffer
from robopt.core.q_losses import aggregate_q, polyak_update, q_regression_loss, sampled_advantage
from robopt.core.surrogates import surrogate
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class OGPOConfig:
    learning_rate: float = option(1e-4, "actor Adam learning rate (DPPO's)")
    critic_learning_rate: float = option(3e-4, "critics' Adam learning rate")
    gamma: float = option(0.99, "discount factor (per decision: an action chunk is one decision)")
    tau: float = option(0.005, "Polyak factor of the target critics")
    reward_scale: float = option(1.0, "rewards are multiplied by this in the critics' target")
    num_critics: int = option(2, "number of Q networks")
    critic_hidden: tuple[int, ...] = option((256, 256), "hidden widths of each Q network")
    critic_activation: str = option("relu", "hidden activation of the Q networks", ("tanh", "relu", "elu", "silu"))
    critic_layer_norm: bool = option(True, "LayerNorm in the Q networks' hidden layers")
    samples: int = option(8, "M: actions sampled per state for the advantage and its sample-mean baseline")
    policy_batch: int = option(64, "S: states of the replay batch a policy update samples chains at")
    policy_every: int = option(1, "a policy update every this many critic updates")
    policy_starts: int = option(0, "critic-only updates first (a fresh critic behind a pretrained policy)")
    policy_epochs: int = option(2, "gradient steps of the clipped objective on each set of sampled chains")
    advantage: str = option(
        "conservative", "critics' advantages: two-sided conservative or of their mean", ("conservative", "mean")
    )
    advantage_norm: str = option(
        "state", "divide advantages by the std per state, over the batch, or not", ("state", "batch", "none")
    )
    ratio: DPPORatioControl = option(DPPORatioControl(), "ratio control of the surrogate (clip per denoising step)")
    clip_base: float = option(0.01, "clip range of the first fine-tuned (noisiest) denoising step")
    clip_rate: float = option(3.0, "exponential rate of the clip range from clip_base to ratio.clip_low over steps")
    gamma_denoise: float = option(0.99, "denoising discount: step j is weighted gamma_denoise^(K' - j - 1)")
    success_coef: float = option(0.0, "weight of the imitation loss on the success buffer (0: no regularizer)")
    success_return: float = option(
        math.inf, "an episode with at least this return counts as a success (inf: only info is_success, on goal tasks)"
    )
    success_capacity: int = option(100_000, "(s, a) pairs the success buffer keeps (the oldest go first)")
    success_max_length: int = option(1000, "longest episode (decisions) the success buffer can keep")
    loop: OffPolicySchedule = option(OffPolicySchedule(learning_starts=0), "loop rhythm (as SAC's)")

    def __post_init__(self) -> None:
        check_rates(self)
        if self.critic_learning_rate <= 0.0:
            raise ValueError(f"critic_learning_rate must be > 0, got {self.critic_learning_rate}")
        if self.samples < 2:
            raise ValueError(f"samples must be >= 2 (the baseline is the mean over the samples), got {self.samples}")
        if min(self.policy_batch, self.policy_every, self.policy_epochs, self.num_critics) < 1:
            raise ValueError("policy_batch, policy_every, policy_epochs and num_critics must be >= 1")
        if self.policy_batch > self.loop.batch_size:
            raise ValueError(f"policy_batch {self.policy_batch} exceeds loop.batch_size {self.loop.batch_size}")
        if self.policy_starts < 0 or not 0.0 < self.clip_base < 1.0 or not 0.0 < self.gamma_denoise <= 1.0:
            raise ValueError("need policy_starts >= 0, clip_base in (0, 1), gamma_denoise in (0, 1]")
        if not self.success_coef >= 0.0 or self.success_coef == math.inf or math.isnan(self.success_return):
            raise ValueError(
                f"success_coef must be finite and >= 0 and success_return a number, got "
                f"{self.success_coef}, {self.success_return}"
            )


class OGPO(NamedState):
    """Critics by TD on replay; the diffusion chain by the clipped objective with the critics' advantages."""

    STATE_PARTS = ("critic", "target_critic", "actor_optimizer", "critic_optimizer", "success")

    def __init__(self, config: OGPOConfig, policy, env) -> None:
        self.config, self.policy = config, policy
        self.critic, self.target_critic = q_critics(
            policy, env, config.critic_hidden, config.critic_activation, config.num_critics, config.critic_layer_norm
        )
        self.actor_optimizer = torch.optim.Adam(policy.denoiser.parameters(), lr=config.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_learning_rate)
        steps = policy.config.ft_steps
        self.weights = denoising_weights(steps, config.gamma_denoise).to(env.device)  # [K']
        self.clips = clip_schedule(steps, config.clip_base, config.ratio.clip_low, config.clip_rate).to(env.device)
        self.success = SuccessBuffer(config.success_capacity, config.success_max_length, config.success_return, env)
        self.updates = 0
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective)

    def clip(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self.policy.action_high), self.policy.action_low)

    def observe(self, obs, action, done, info) -> None:
        if self.config.success_coef > 0.0:
            self.success.observe(obs, action, done, info)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.updates = int(state["updates"])

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        config, policy, obs = self.config, self.policy, batch["obs"]
        with torch.no_grad():
            next_action = self.clip(policy.act(batch["next_obs"])[0])
            next_q = aggregate_q(self.target_critic(batch["next_obs"], next_action), "min")
            bootstrap = batch["discount"] * (~batch["terminated"]).to(next_q.dtype)
            target = config.reward_scale * batch["reward"] + bootstrap * next_q
        q = self.critic(obs, batch["action"])
        critic_loss, td_error = q_regression_loss(q, target, batch["weights"], scale=1.0)
        optimizer_step(self.critic_optimizer, critic_loss, self.collective)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), config.tau)
        self.updates += 1
        metrics = {"critic_loss": critic_loss.detach(), "q_mean": q.detach().mean(), "td_error": td_error}
        if self.updates > config.policy_starts and self.updates % config.policy_every == 0:
            metrics |= self.policy_update(obs[: config.policy_batch])
        return metrics

    def policy_update(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sample M chains at each of the S states, score them with the critics, and take the clipped steps."""
        config, policy = self.config, self.policy
        states = obs.repeat_interleave(config.samples, dim=0)  # [S M, D]
        action, info = policy.act(states)  # chains [S M, K' + 1, X] and per-step log-probabilities [S M, K']
        with torch.no_grad():
            q = self.critic(states, self.clip(action)).reshape(-1, obs.shape[0], config.samples)  # [C, S, M]
        advantage = sampled_advantage(q, config.advantage, config.advantage_norm).reshape(-1)  # [S M]
        for _ in range(config.policy_epochs):
            log_ratio = policy.log_ratio(states, action, info)  # [S M, K']
            loss, metrics = surrogate(log_ratio, advantage, config.ratio, weight=self.weights, clip_range=self.clips)
            if config.success_coef > 0.0:  # logged as 0 until a success arrives (the same keys on every rank)
                bc_loss = loss.new_zeros(())
                if self.success.size > 0:
                    success_obs, success_action = self.success.sample(obs.shape[0])
                    bc_loss = policy.imitation_loss(success_obs, success_action).mean()
                    loss = loss + config.success_coef * bc_loss
                metrics["success_bc_loss"] = bc_loss.detach()
            optimizer_step(self.actor_optimizer, loss, self.collective)
        metrics = {key: value.detach() for key, value in metrics.items()}
        return metrics | {
            "policy_loss": loss.detach(),
            "advantage_nonzero": (advantage != 0).float().mean(),
            "success_pairs": torch.tensor(float(self.success.size)),
        }


def build_ogpo_loop(config: OGPOConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """OGPO over a diffusion policy (per-denoising-step log-probabilities) on the off-policy loop."""
    from robopt.policies.diffusion import DiffusionPolicy

    if not isinstance(policy, DiffusionPolicy):
        raise ConfigError(
            f"algo.name=ogpo needs policy.name=diffusion (a chain with per-step log-probabilities), got "
            f"{type(policy).__name__}"
        )
    if not bool(policy.base_frozen):  # the first K - K' steps keep the network RL starts from, as DPPO's
        policy.freeze_base()
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, OGPO(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
