"""Flow Q-learning (Park, Li and Levine 2025) on the off-policy loop: a one-step policy distilled from a flow.

Shapes: B batch, C critics, D obs dim, A action dim; y actions in the policy's normalized units.

The policy is a flow policy with ``one_step: true`` (``robopt.policies.flow``): the velocity field v (the BC flow)
and the one-step network mu(s, z), z ~ N(0, I). One update on a replay batch (s, a, r, s', terminated):

- critic: y_t = r + discount (1 - terminated) agg_c Q'_c(s', clip(mu(s', z'))), L_Q = sum_c mean (Q_c(s, a) - y_t)^2;
- actor, one optimizer over v and mu:
  L = L_flow(s, a) + alpha mean_{B, A} (mu(s, z) - clip(flow(s, z)))^2 - lambda mean_B mean_c Q_c(s, clip(mu(s, z)))
  where L_flow is the conditional flow-matching loss of the data's actions (the BC flow keeps learning the data),
  flow(s, z) integrates v from x_0 = z with the policy's integrator and steps (no gradient: the distillation
  target), and lambda = 1 / mean |Q| (detached) when ``normalize_q_loss`` (the paper's option), else 1;
- Polyak averaging of Q'.

Acting, evaluation and export call mu alone (x_0 = z ~ N(0, I), or z = 0 deterministically): one network call.
The paper's notation maps as: alpha = ``alpha`` (its distillation coefficient), q_agg = ``q_agg``, flow steps =
``policy.steps``. Actions are clipped to the env's bounds where the paper clips to [-1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_updates import NamedState, check_rates, frozen, optimizer_step, q_critics
from robopt.core.q_losses import aggregate_q, polyak_update, q_regression_loss
from robopt.options import ConfigError, option
from robopt.policies.flow import integrate


@dataclass(frozen=True)
class FQLConfig:
    learning_rate: float = option(3e-4, "Adam learning rate of the actor (flow and one-step) and the critics")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target critics")
    alpha: float = option(
        1.0,
        "distillation coefficient: weight of mean (mu(s, z) - flow(s, z))^2; tune per task (with normalize_q_loss "
        "the FQL authors suggest 0.03 to 10)",
    )
    q_agg: str = option("mean", "how the critics' values combine in the target and the actor loss", ("mean", "min"))
    normalize_q_loss: bool = option(True, "divide the actor's Q term by mean |Q| (detached), as the paper's option")
    reward_scale: float = option(1.0, "rewards are multiplied by this in the critic's target (as IQL's, to warm-start)")
    num_critics: int = option(2, "number of Q networks")
    critic_hidden: tuple[int, ...] = option((256, 256), "hidden widths of each Q network")
    critic_activation: str = option("relu", "hidden activation of the Q networks", ("tanh", "relu", "elu", "silu"))
    critic_layer_norm: bool = option(True, "LayerNorm in the Q networks' hidden layers (the paper's default)")
    loop: OffPolicySchedule = option(
        OffPolicySchedule(learning_starts=0), "loop rhythm; offline: loop.dataset and loop.offline_updates"
    )

    def __post_init__(self) -> None:
        check_rates(self)
        if not self.alpha >= 0.0 or self.alpha == float("inf"):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha}")
        if self.num_critics < 1:
            raise ValueError(f"num_critics must be >= 1, got {self.num_critics}")


def distillation_loss(one_step_y: torch.Tensor, flow_y: torch.Tensor) -> torch.Tensor:
    """mean over rows and action dims of (mu(s, z) - flow(s, z))^2; the flow's actions carry no gradient."""
    return (one_step_y - flow_y.detach()).square().mean()


class FQL(NamedState):
    """One FQL update per batch: critics (TD through the one-step policy), actor (flow BC + distillation + Q)."""

    STATE_PARTS = ("critic", "target_critic", "actor_optimizer", "critic_optimizer")

    def __init__(self, config: FQLConfig, policy, env) -> None:
        self.config, self.policy = config, policy
        self.critic, self.target_critic = q_critics(
            policy, env, config.critic_hidden, config.critic_activation, config.num_critics, config.critic_layer_norm
        )
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective)

    def one_step_action(self, obs: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(y [B, A] normalized, unclipped; the clipped env action [B, A]) of mu(s, z)."""
        policy = self.policy
        y = policy.one_step_y(policy._obs_norm(obs), z)
        return y, policy.clip(policy.to_env(y))

    @torch.no_grad()
    def flow_action(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The BC flow's action from x_0 = z, clipped to the bounds, in normalized units [B, A]."""
        policy = self.policy
        y = integrate(policy.velocity, policy._obs_norm(obs), z, policy.config.steps, policy.config.integrator)
        return policy.to_normalized(policy.clip(policy.to_env(y)))

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        config, policy, obs = self.config, self.policy, batch["obs"]
        with torch.no_grad():
            _, next_action = self.one_step_action(batch["next_obs"], torch.randn_like(batch["action"]))
            next_q = aggregate_q(self.target_critic(batch["next_obs"], next_action), config.q_agg)
            bootstrap = batch["discount"] * (~batch["terminated"]).to(next_q.dtype)
            target = config.reward_scale * batch["reward"] + bootstrap * next_q
        q = self.critic(obs, batch["action"])  # [C, B]
        critic_loss, td_error = q_regression_loss(q, target, batch["weights"], scale=1.0)
        optimizer_step(self.critic_optimizer, critic_loss, self.collective)

        flow_loss = policy.imitation_loss(obs, batch["action"]).mean()
        z = torch.randn_like(batch["action"])
        y, action = self.one_step_action(obs, z)
        distill = distillation_loss(y, self.flow_action(obs, z))
        with frozen(self.critic):
            q_pi = aggregate_q(self.critic(obs, action), "mean")
            scale = 1.0 / q_pi.detach().abs().mean().clamp_min(1e-6) if config.normalize_q_loss else 1.0
            q_loss = -scale * q_pi.mean()
            actor_loss = flow_loss + config.alpha * distill + q_loss
            optimizer_step(self.actor_optimizer, actor_loss, self.collective)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), config.tau)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "flow_loss": flow_loss.detach(),
            "distill_loss": distill.detach(),
            "q_loss": q_loss.detach(),
            "q_mean": q.detach().mean(),
            "td_error": td_error,
        }


def build_fql_loop(config: FQLConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """FQL over a flow policy with its one-step network (``policy.one_step: true``), on the off-policy loop."""
    from robopt.policies.flow import FlowPolicy

    if not isinstance(policy, FlowPolicy) or policy.one_step is None:  # (one_step excludes guidance_scale > 0)
        got = type(policy).__name__ + (" without policy.one_step" if isinstance(policy, FlowPolicy) else "")
        raise ConfigError(f"algo.name=fql needs policy.name=flow with policy.one_step=true, got {got}")
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, FQL(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
