"""Soft Actor-Critic (Haarnoja et al. 2018a, b) on the off-policy loop: twin Q, squashed Gaussian, auto temperature.

Shapes: B batch, C = 2 critics, A action dim. The losses are the pure functions of ``robopt.core.q_losses``;
this module holds the config and the networks' optimizers; the order of one update (critic, actor, temperature,
Polyak averaging of the target critics) is ``robopt.algorithms.offpolicy_updates.sac_update``, which the eager and
the compiled (``algo.compile``) updates both run. The actor is robopt's Gaussian policy with ``squash: true``,
usually with ``state_dependent_std: true`` (SB3's actor; tests/algorithms/test_sac_sb3_parity.py checks losses and
whole updates against SB3). Adam is the fused kernel (one call per optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_compiled import CompiledSACUpdate
from robopt.algorithms.offpolicy_updates import EagerParts, NamedState, check_rates, q_critics, sac_update
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class SACConfig:
    learning_rate: float = option(3e-4, "Adam learning rate of actor, critics and temperature")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target critics")
    ent_coef: float = option(0.0, "fixed entropy temperature alpha; 0 tunes it automatically from ent_coef_init")
    ent_coef_init: float = option(
        1.0,
        "automatic temperature's initial alpha (SB3's auto_<init>); lower it when rewards per step are small "
        "(a robot task's weights times dt), or the entropy bonus rules the first updates",
    )
    target_entropy: float = option(0.0, "target entropy of the automatic temperature; 0 means -action_dim")
    critic_hidden: tuple[int, ...] = option((256, 256), "hidden widths of each Q network")
    critic_activation: str = option("relu", "hidden activation of the Q networks", ("tanh", "relu", "elu", "silu"))
    compile: bool = option(
        False,
        "torch.compile the whole update (targets, losses, Adam steps, Polyak) into one graph; a one-off "
        "compile of 20-60 s, then faster updates; where torch cannot compile, says so once and runs eager",
    )
    loop: OffPolicySchedule = option(OffPolicySchedule(), "loop rhythm: warm-up, update ratio, batch, buffer")

    def __post_init__(self) -> None:
        check_rates(self)
        if self.ent_coef < 0.0:
            raise ValueError(f"ent_coef must be >= 0 (0: automatic), got {self.ent_coef}")
        if not self.ent_coef_init > 0.0:
            raise ValueError(f"ent_coef_init must be > 0, got {self.ent_coef_init}")


class SAC(NamedState):
    """One SAC update per replay batch: critic regression, actor step, temperature step, target averaging."""

    STATE_PARTS = ("critic", "target_critic", "actor_optimizer", "critic_optimizer", "alpha_optimizer")

    def __init__(self, config: SACConfig, policy, env) -> None:
        action_dim, device = env.action_dim, env.device
        self.config, self.policy = config, policy
        self.critic, self.target_critic = q_critics(policy, env, config.critic_hidden, config.critic_activation, 2)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate, fused=True)
        self.auto_temperature = config.ent_coef == 0.0
        initial = config.ent_coef_init if self.auto_temperature else config.ent_coef
        log_initial = float(torch.log(torch.tensor(initial)))  # in float32, as alpha is kept
        self.log_alpha = torch.full((), log_initial, device=device, requires_grad=self.auto_temperature)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.learning_rate, fused=True)
        self.target_entropy = config.target_entropy or -float(action_dim)
        self.eager = EagerParts(self, "rsample")
        self.compiled = CompiledSACUpdate(self) if config.compile else None
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective): averaged gradients

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        """``sac_update`` on this batch, in the compiled graph (``algo.compile``) or eagerly."""
        next_noise = torch.randn_like(batch["action"])  # the reparameterization noise: s' first, then s
        noise = torch.randn_like(batch["action"])
        if self.compiled is not None and self.compiled.active:
            metrics = self.compiled(batch, next_noise, noise)
            if metrics is not None:
                return metrics
        return sac_update(self.eager, batch, next_noise, noise, self.target_entropy, self.config.tau)

    def state_dict(self) -> dict:
        return super().state_dict() | {"log_alpha": self.log_alpha.detach().clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.compiled is not None and self.compiled.active:
            self.compiled.refresh()  # the optimizers' state tensors were replaced


def build_sac_loop(config: SACConfig, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """SAC over ``policy`` (a squashed Gaussian) with its replay buffer, on the off-policy loop."""
    from robopt.policies.gaussian import GaussianPolicy

    if not isinstance(policy, GaussianPolicy) or not policy.squash:
        raise ConfigError("algo.name=sac needs policy.name=gaussian with policy.squash=true (a tanh-squashed Gaussian)")
    replay = build_replay(config.loop, config.gamma, env)
    algorithm = SAC(config, policy, env)
    return OffPolicyLoop(env, policy, algorithm, replay, config.loop, seed=seed, env_id=env_id)
