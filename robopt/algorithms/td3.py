"""TD3 (Fujimoto et al. 2018) on the off-policy loop; DDPG (Lillicrap et al. 2016) is a TD3 config.

Shapes: B batch, C critics, A action dim. TD3 = clipped double-Q targets, target policy smoothing and delayed
actor and target updates. DDPG is the same update with one critic, no smoothing and no delay
(``algo.name: ddpg`` only changes those defaults). The deterministic actor is the mean of robopt's squashed
Gaussian policy (``mean_action``; its log-std is unused); exploration adds Gaussian noise in action space.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from robopt.algorithms.offpolicy import OffPolicyLoop, OffPolicySchedule, build_replay
from robopt.algorithms.offpolicy_compiled import CompiledTD3Update
from robopt.algorithms.offpolicy_updates import EagerParts, NamedState, check_rates, q_critics, td3_update
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class TD3Config:
    learning_rate: float = option(1e-3, "Adam learning rate of actor and critics")
    gamma: float = option(0.99, "discount factor")
    tau: float = option(0.005, "Polyak factor of the target actor and critics")
    num_critics: int = option(2, "Q networks (2: clipped double-Q; DDPG uses 1)")
    policy_delay: int = option(2, "critic updates per actor and target update (DDPG: 1)")
    target_noise: float = option(0.2, "std of the target policy smoothing noise, in half-ranges (DDPG: 0)")
    target_noise_clip: float = option(0.5, "clip of the smoothing noise, in half-ranges")
    exploration_noise: float = option(0.1, "std of the Gaussian exploration noise, in half-ranges of the action")
    critic_hidden: tuple[int, ...] = option((256, 256), "hidden widths of each Q network")
    critic_activation: str = option("relu", "hidden activation of the Q networks", ("tanh", "relu", "elu", "silu"))
    compile: bool = option(
        False,
        "torch.compile the whole update (targets, losses, Adam steps, Polyak) into one graph per kind "
        "(critic only, critic and actor); where torch cannot compile, says so once and runs eager",
    )
    loop: OffPolicySchedule = option(OffPolicySchedule(), "loop rhythm: warm-up, update ratio, batch, buffer")

    def __post_init__(self) -> None:
        check_rates(self)
        if self.num_critics < 1 or self.policy_delay < 1:
            raise ValueError(f"num_critics and policy_delay must be >= 1, got {self.num_critics}, {self.policy_delay}")
        if min(self.target_noise, self.target_noise_clip, self.exploration_noise) < 0.0:
            raise ValueError("target_noise, target_noise_clip and exploration_noise must be >= 0")


@dataclass(frozen=True)
class DDPGConfig(TD3Config):
    num_critics: int = option(1, "Q networks (DDPG: 1)")
    policy_delay: int = option(1, "critic updates per actor and target update (DDPG: 1)")
    target_noise: float = option(0.0, "std of the target policy smoothing noise (DDPG: none)")


class TD3(NamedState):
    """Critic regression every update; actor, target actor and target critics every ``policy_delay`` updates."""

    STATE_PARTS = ("critic", "target_critic", "target_policy", "actor_optimizer", "critic_optimizer")

    def __init__(self, config: TD3Config, policy, env) -> None:
        self.config, self.policy = config, policy
        self.low, self.high = env.action_low, env.action_high
        self.half_range = (env.action_high - env.action_low) / 2
        self.critic, self.target_critic = q_critics(
            policy, env, config.critic_hidden, config.critic_activation, config.num_critics
        )
        self.target_policy = copy.deepcopy(policy).requires_grad_(False)
        self.target_policy.normalizer = policy.normalizer  # the one observation normalizer (a copy would stay stale)
        self.actor_params = [p for name, p in policy.named_parameters() if name != "log_std"]
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=config.learning_rate, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate, fused=True)
        self.updates = 0
        scale = self.half_range.mean()  # smoothing noise std and clip in the action's units
        noise_std, noise_clip = float(config.target_noise * scale), float(config.target_noise_clip * scale)
        self.smoothing = (noise_std, noise_clip, self.low, self.high)
        self.target_actor_params = [p for name, p in self.target_policy.named_parameters() if name != "log_std"]
        self.eager = EagerParts(self, "mean_action", (self.target_actor_params, self.actor_params))
        self.compiled = CompiledTD3Update(self) if config.compile else None
        self.collective = None  # a data-parallel run's (set by OffPolicyLoop.use_collective): averaged gradients

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """mu(s) plus Gaussian noise of ``exploration_noise`` half-ranges, clipped to the bounds [N, A]."""
        action = self.policy.mean_action(obs)
        noise = torch.randn(action.shape, generator=generator, device=action.device, dtype=action.dtype)
        action = action + noise * self.config.exploration_noise * self.half_range
        return torch.maximum(torch.minimum(action, self.high), self.low)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        """``td3_update`` on this batch, in the compiled graph (``algo.compile``) or eagerly."""
        update_actor = (self.updates + 1) % self.config.policy_delay == 0
        action, noise = batch["action"], None
        if self.config.target_noise > 0.0:  # the smoothing noise, from the global RNG
            noise = torch.randn(action.shape, device=action.device, dtype=action.dtype)
        metrics = None
        if self.compiled is not None and self.compiled.active:
            metrics = self.compiled(batch, noise, update_actor)
        if metrics is None:
            metrics = td3_update(self.eager, batch, noise, update_actor, self.smoothing, self.config.tau)
        self.updates += 1
        return metrics

    def state_dict(self) -> dict:
        return super().state_dict() | {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.updates = int(state["updates"])
        if self.compiled is not None and self.compiled.active:
            self.compiled.refresh()  # the optimizers' state tensors were replaced


def build_td3_loop(config: TD3Config, env, policy, seed: int = 0, env_id: str = "") -> OffPolicyLoop:
    """TD3 (or DDPG) over the squashed Gaussian policy's mean, with its replay buffer, on the off-policy loop."""
    from robopt.policies.gaussian import GaussianPolicy

    if not isinstance(policy, GaussianPolicy) or not policy.squash:
        raise ConfigError(
            "algo.name=td3 and ddpg need policy.name=gaussian with policy.squash=true (its tanh mean is the actor)"
        )
    replay = build_replay(config.loop, config.gamma, env)
    return OffPolicyLoop(env, policy, TD3(config, policy, env), replay, config.loop, seed=seed, env_id=env_id)
