"""Implicit Q-learning (Kostrikov, Nair and Levine 2022) on the off-policy loop: offline RL and its fine-tuning.

Shapes: B batch, C = 2 critics, D obs dim, A action dim.

IQL never queries the policy for an action it has not seen in the data. One update, on a replay batch
(s, a, r, s', terminated), with target critics Q' and tau the expectile:

- value:  L_V = mean expectile_tau(min_c Q'_c(s, a) - V(s))   (V tracks an upper expectile of Q over the data)
- critic: L_Q = sum_c mean (Q_c(s, a) - (k r + discount (1 - terminated) V(s')))^2   (k: ``reward_scale``)
- actor:  L_pi = mean min(exp(beta (min_c Q'_c(s, a) - V(s))), w_max) * l_pi(s, a)   (advantage-weighted regression)
- Polyak averaging of Q' toward Q.

l_pi is the policy's own imitation loss, so one extraction serves every kind robopt clones: the Gaussian's
negative log-likelihood (IQL's published form) and, by the same weighting, the flow policy's flow-matching loss and
the diffusion policy's noise regression (advantage-weighted generative cloning: an inference where the paper is
silent). The losses are the pure functions of ``robopt.core.q_losses``. With ``algo.loop.dataset`` and
``algo.loop.offline_updates`` this is offline IQL (``total_steps: 0``); with online steps after them it fine-tunes,
acting with the policy's stochastic action, as the paper's online stage does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_updates import NamedState, check_rates, optimizer_step, q_critics
from robopt.core.protocols import SupportsImitation, require
from robopt.core.q_losses import advantage_weights, expectile_loss, polyak_update, q_regression_loss
from robopt.options import option
from robopt.policies.critics import ValueCritic


@dataclass(frozen=True)
class IQLConfig:
    learning_rate: float = option(3e-4, "Adam learning rate of actor, critics and value network")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target critics")
    expectile: float = option(0.7, "expectile of Q that V regresses to, in (0, 1) (0.5: the mean; paper 0.7)")
    temperature: float = option(3.0, "inverse temperature beta of the advantage weights (paper 3 on locomotion)")
    max_weight: float = option(100.0, "largest advantage weight exp(beta A)")
    reward_scale: float = option(1.0, "rewards are multiplied by this in the critic's target")
    critic_hidden: tuple[int, ...] = option((256, 256), "hidden widths of each Q network and of V")
    critic_activation: str = option("relu", "hidden activation of Q and V", ("tanh", "relu", "elu", "silu"))
    loop: OffPolicySchedule = option(
        OffPolicySchedule(learning_starts=0), "loop rhythm; offline: loop.dataset and loop.offline_updates"
    )

    def __post_init__(self) -> None:
        check_rates(self)
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile must be in (0, 1), got {self.expectile}")
        if not self.temperature >= 0.0 or not self.max_weight > 0.0:
            raise ValueError(f"need temperature >= 0 and max_weight > 0, got {self.temperature}, {self.max_weight}")


def value_network(policy, env, hidden, activation: str) -> ValueCritic:
    """V(s) reading the policy's observation normalizer (as the Q critics do)."""
    value = ValueCritic(env.obs_dim, hidden, activation, policy.normalizer.enabled, orthogonal_init=False)
    value = value.to(env.device)
    value.normalizer = policy.normalizer
    return value


class IQL(NamedState):
    """One IQL update per batch: value (expectile), critics (TD to V), actor (advantage-weighted), targets."""

    STATE_PARTS = ("critic", "target_critic", "value", "actor_optimizer", "critic_optimizer", "value_optimizer")

    def __init__(self, config: IQLConfig, policy, env) -> None:
        self.config, self.policy = config, policy
        self.critic, self.target_critic = q_critics(policy, env, config.critic_hidden, config.critic_activation, 2)
        self.value = value_network(policy, env, config.critic_hidden, config.critic_activation)
        lr = config.learning_rate
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.value_optimizer = torch.optim.Adam(self.value.net.parameters(), lr=lr)
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        config, obs, action = self.config, batch["obs"], batch["action"]
        with torch.no_grad():
            target_q = self.target_critic(obs, action).min(0).values  # [B]
            next_v = self.value(batch["next_obs"])
            bootstrap = batch["discount"] * (~batch["terminated"]).to(next_v.dtype)
            q_target = config.reward_scale * batch["reward"] + bootstrap * next_v
        v = self.value(obs)
        value_loss = (expectile_loss(target_q - v, config.expectile) * batch["weights"]).mean()
        optimizer_step(self.value_optimizer, value_loss, self.collective)

        q = self.critic(obs, action)  # [C, B]
        critic_loss, td_error = q_regression_loss(q, q_target, batch["weights"], scale=1.0)
        optimizer_step(self.critic_optimizer, critic_loss, self.collective)

        advantage = target_q - v.detach()
        weights = advantage_weights(advantage, config.temperature, config.max_weight)
        actor_loss = (weights * self.policy.imitation_loss(obs, action)).mean()
        optimizer_step(self.actor_optimizer, actor_loss, self.collective)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), config.tau)
        return {
            "value_loss": value_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q.detach().mean(),
            "v_mean": v.detach().mean(),
            "advantage_mean": advantage.mean(),
            "weight_mean": weights.mean(),
            "td_error": td_error,
        }


def build_iql_loop(config: IQLConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """IQL over any policy with an imitation loss (Gaussian, flow, diffusion), on the off-policy loop."""
    from robopt.policies.flow import refuse_one_step

    require(policy, SupportsImitation, "algo.name=iql", "its actor step is advantage-weighted imitation")
    refuse_one_step(policy, "algo.name=iql")
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, IQL(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
