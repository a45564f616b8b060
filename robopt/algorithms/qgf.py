"""Q-guided flow (``algo.name: qgf``): a behaviour-cloned flow sampled along a critic's action gradient.

Shapes: B batch, C critics, A action dim.

No policy-gradient step: the flow's velocity keeps fitting the replay's actions by flow matching (behaviour
cloning on offline and online data), and the critics (``policy.guide``: they live in the policy, so evaluation,
checkpoints and exports carry them) learn by TD toward the guided sampler's own next actions:

    y_t  = k r + gamma (1 - d) agg_c Q'_c(s', clip(a')),   a' ~ guided flow(s')  (``robopt.policies.guidance``)
    L_Q  = sum_c mean_B (Q_c(s, a) - y_t)^2,     L_flow = CFM loss of (s, a)

then Polyak averaging of Q'. Acting integrates v + w t grad_a Qbar(s, x + (1 - t) v) with w =
``policy.guidance_scale``; w is a sampling knob: the same weights sample the plain flow at w = 0. The critics
warm-start from an offline run (``init_from`` an IQL run: its Q networks, with the same reward scale), and the
flow from a BC run (``init_from`` loads the velocity; the two come from one run directory).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_updates import NamedState, check_rates, optimizer_step
from robopt.core.q_losses import aggregate_q, polyak_update, q_regression_loss
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class QGFConfig:
    learning_rate: float = option(3e-4, "Adam learning rate of the flow and the critics")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target critics")
    reward_scale: float = option(1.0, "rewards are multiplied by this in the critic's target (as IQL's, to warm-start)")
    q_agg: str = option("min", "how the target critics' values combine in the TD target", ("mean", "min"))
    clone: bool = option(True, "keep fitting the flow to the replay's actions (flow matching); false: flow frozen")
    loop: OffPolicySchedule = option(
        OffPolicySchedule(learning_starts=0), "loop rhythm; offline data: loop.dataset and loop.offline_updates"
    )

    def __post_init__(self) -> None:
        check_rates(self)


class QGF(NamedState):
    """One update per batch: critics by TD through the guided sampler, the flow by flow matching, targets."""

    STATE_PARTS = ("critic", "target_critic", "actor_optimizer", "critic_optimizer")

    def __init__(self, config: QGFConfig, policy, env) -> None:
        self.config, self.policy = config, policy
        self.critic = policy.guide
        self.target_critic = copy.deepcopy(policy.guide).requires_grad_(False)
        self.target_critic.normalizer = policy.normalizer
        self.actor_optimizer = torch.optim.Adam(policy.velocity.parameters(), lr=config.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        config, policy, obs = self.config, self.policy, batch["obs"]
        with torch.no_grad():
            next_action = policy.clip(policy.sample(batch["next_obs"]))
            next_q = aggregate_q(self.target_critic(batch["next_obs"], next_action), config.q_agg)
            bootstrap = batch["discount"] * (~batch["terminated"]).to(next_q.dtype)
            target = config.reward_scale * batch["reward"] + bootstrap * next_q
        q = self.critic(obs, batch["action"])
        critic_loss, td_error = q_regression_loss(q, target, batch["weights"], scale=1.0)
        optimizer_step(self.critic_optimizer, critic_loss, self.collective)
        metrics = {"critic_loss": critic_loss.detach(), "q_mean": q.detach().mean(), "td_error": td_error}
        if config.clone:
            flow_loss = policy.imitation_loss(obs, batch["action"]).mean()
            optimizer_step(self.actor_optimizer, flow_loss, self.collective)
            metrics["flow_loss"] = flow_loss.detach()
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), config.tau)
        return metrics


def build_qgf_loop(config: QGFConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """Q-guided sampling of a flow policy whose critics (``policy.guidance_scale > 0``) it trains by TD."""
    from robopt.policies.flow import FlowPolicy

    if not isinstance(policy, FlowPolicy) or policy.guide is None:
        got = type(policy).__name__ + (" with policy.guidance_scale=0" if isinstance(policy, FlowPolicy) else "")
        raise ConfigError(
            f"algo.name=qgf needs policy.name=flow with policy.guidance_scale > 0 (critics that guide sampling), "
            f"got {got}"
        )
    if policy.edit is not None:
        raise ConfigError(
            "algo.name=qgf guides the flow's integration; policy.edit_bound > 0 is EXPO's (algo.name=expo)"
        )
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, QGF(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
