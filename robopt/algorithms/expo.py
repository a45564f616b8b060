"""EXPO, expressive policy optimization (``algo.name: expo``): a cloned flow base, a bounded Gaussian edit policy
trained SAC-style on Q, and acting by the argmax-Q of N base samples and their edits.

Shapes: B batch, C critics, A action dim; y actions in the policy's normalized units.

The policy is a flow policy with ``edit_bound`` b > 0 (``robopt.policies.expo``: base velocity v, edit policy
pi_e, critics Q in ``policy.guide``). One update on a replay batch (s, a, r, s', d):

- critics: y_t = k r + gamma (1 - d) min_c Q'_c(s', a'), a' = the acting rule at s' (N base samples, their
  sampled edits, the argmax of the online critics' mean), L_Q = sum_c mean_B (Q_c(s, a) - y_t)^2;
- base: L_flow = the flow-matching loss of the replay's actions (offline and online data: cloning never stops);
- edit: y ~ base(s) (no gradient), (delta, log pi_e) ~ pi_e(s, y) reparameterized,
  L_e = mean_B (alpha log pi_e - min_c Q_c(s, clip(y + delta))), and the temperature alpha tuned to the target
  entropy -A as SAC's (``target_entropy``);
- Polyak averaging of Q'.

Where the paper is silent or differs, robopt's choices: the TD target carries no entropy term (its backup takes
the deterministic argmax over sampled candidates), the edit's base actions are fresh flow samples (not the replay's
actions), and the deterministic action uses N fixed noise vectors (so exports are deterministic).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_updates import NamedState, check_rates, frozen, optimizer_step
from robopt.core.q_losses import polyak_update, q_regression_loss, temperature_loss
from robopt.options import ConfigError, option
from robopt.policies.flow import integrate


@dataclass(frozen=True)
class EXPOConfig:
    learning_rate: float = option(3e-4, "Adam learning rate of the base flow, the edit policy, critics, temperature")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target critics")
    reward_scale: float = option(1.0, "rewards are multiplied by this in the critic's target (as IQL's, to warm-start)")
    target_entropy: float = option(0.0, "target entropy of the edit policy's temperature; 0 means -action_dim")
    loop: OffPolicySchedule = option(
        OffPolicySchedule(learning_starts=0), "loop rhythm; offline data: loop.dataset and loop.offline_updates"
    )

    def __post_init__(self) -> None:
        check_rates(self)


class EXPO(NamedState):
    """One update per batch: critics (TD through the acting rule), base (flow matching), edit (SAC-style), alpha."""

    STATE_PARTS = ("critic", "target_critic", "base_optimizer", "edit_optimizer", "critic_optimizer",
                   "alpha_optimizer")  # fmt: skip

    def __init__(self, config: EXPOConfig, policy, env) -> None:
        self.config, self.policy = config, policy
        self.critic = policy.guide
        self.target_critic = copy.deepcopy(policy.guide).requires_grad_(False)
        self.target_critic.normalizer = policy.normalizer
        lr = config.learning_rate
        self.base_optimizer = torch.optim.Adam(policy.velocity.parameters(), lr=lr)
        self.edit_optimizer = torch.optim.Adam(policy.edit.parameters(), lr=lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.log_alpha = torch.zeros((), device=env.device, requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)
        self.target_entropy = config.target_entropy or -float(env.action_dim)
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "log_alpha": self.log_alpha.detach().clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        config, policy, obs = self.config, self.policy, batch["obs"]
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action = policy.sample(batch["next_obs"])  # the acting rule, clipped
            next_q = self.target_critic(batch["next_obs"], next_action).min(0).values
            bootstrap = batch["discount"] * (~batch["terminated"]).to(next_q.dtype)
            target = config.reward_scale * batch["reward"] + bootstrap * next_q
        q = self.critic(obs, batch["action"])
        critic_loss, td_error = q_regression_loss(q, target, batch["weights"], scale=1.0)
        optimizer_step(self.critic_optimizer, critic_loss, self.collective)

        flow_loss = policy.imitation_loss(obs, batch["action"]).mean()
        optimizer_step(self.base_optimizer, flow_loss, self.collective)

        obs_norm = policy._obs_norm(obs)
        with torch.no_grad():
            x0 = torch.randn_like(batch["action"]) * policy.config.noise_std
            base = integrate(policy.velocity, obs_norm, x0, policy.config.steps, policy.config.integrator)
        delta, log_prob = policy.edit.rsample(obs_norm, base)
        edited = policy.clip(policy.to_env(base + delta))
        with frozen(self.critic):
            edit_loss = (alpha * log_prob - self.critic(obs, edited).min(0).values).mean()
            optimizer_step(self.edit_optimizer, edit_loss, self.collective)
        alpha_loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        optimizer_step(self.alpha_optimizer, alpha_loss, self.collective)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), config.tau)
        return {
            "critic_loss": critic_loss.detach(),
            "flow_loss": flow_loss.detach(),
            "edit_loss": edit_loss.detach(),
            "alpha": alpha,
            "edit_entropy": -log_prob.detach().mean(),
            "q_mean": q.detach().mean(),
            "td_error": td_error,
        }


def build_expo_loop(config: EXPOConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """EXPO over a flow policy with an edit policy and critics (``policy.edit_bound > 0``)."""
    from robopt.policies.flow import FlowPolicy

    if not isinstance(policy, FlowPolicy) or policy.edit is None:
        got = type(policy).__name__ + (" with policy.edit_bound=0" if isinstance(policy, FlowPolicy) else "")
        raise ConfigError(
            f"algo.name=expo needs policy.name=flow with policy.edit_bound > 0 (the bound of its edits), got {got}"
        )
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, EXPO(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
