"""What the off-policy updates are made of, and the update orders of SAC and TD3, each written once and run two ways
(DESIGN.md section 9).

The parts every off-policy algorithm shares: ``q_critics`` (online critics and their target copy), ``optimizer_step``
(gradients averaged over the ranks of a data-parallel run), ``frozen`` (a module that takes no gradient inside),
``check_rates`` (its config's learning rate, tau and gamma) and ``NamedState`` (state by named parts).

Shapes: B batch, C critics, A action dim. ``sac_update`` and ``td3_update`` are the order of one update (targets,
critic step, actor step, temperature step, Polyak averaging) over ``parts``: what evaluates the networks and steps
their optimizers. ``EagerParts`` runs them on the algorithm's own modules with autograd and torch's fused Adam (a
data-parallel collective averages the gradients); ``robopt.algorithms.offpolicy_compiled.GraphParts`` runs the
same functions inside one compiled graph, with ``torch.func`` gradients and Adam written out on torch's own
optimizer state. A change to SAC's or TD3's update is made here, once.

The random draws (SAC's reparameterization noise for s' then s, TD3's target smoothing noise) are drawn by the
caller, outside the update, from the global torch RNG, and passed in.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from robopt.core.q_losses import (
    deterministic_actor_loss,
    polyak_update,
    q_regression_loss,
    sac_actor_loss,
    smoothed_target_action,
    soft_q_target,
    temperature_loss,
)

__all__ = [
    "EagerParts", "NamedState", "check_rates", "frozen", "optimizer_step", "q_critics", "sac_update", "td3_update",
]  # fmt: skip


def check_rates(config) -> None:
    """ValueError unless ``config.learning_rate > 0``, ``tau`` in (0, 1] and ``gamma`` in [0, 1] (every off-policy
    algorithm's config checks these first)."""
    if config.learning_rate <= 0.0 or not 0.0 < config.tau <= 1.0 or not 0.0 <= config.gamma <= 1.0:
        raise ValueError(
            f"need learning_rate > 0, tau in (0, 1], gamma in [0, 1]; got {config.learning_rate}, {config.tau}, "
            f"{config.gamma}"
        )


class NamedState(Protocol):
    """``state_dict``/``load_state_dict`` of an algorithm as the state of its parts named in ``STATE_PARTS``
    (modules and optimizers)."""

    STATE_PARTS: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.STATE_PARTS}

    def load_state_dict(self, state: dict) -> None:
        for name in self.STATE_PARTS:
            getattr(self, name).load_state_dict(state[name])


def q_critics(policy, env, hidden, activation: str, num_critics: int, layer_norm: bool = False):
    """Online state-action critics and their gradient-free target copy; both read the policy's obs normalizer."""
    from robopt.policies.critics import QCritic

    enabled = policy.normalizer.enabled
    critic = QCritic(env.obs_dim, env.action_dim, hidden, activation, num_critics, enabled, layer_norm=layer_norm)
    critic = critic.to(env.device)
    critic.normalizer = policy.normalizer  # one observation normalizer for actor and critics (buffers only)
    target = copy.deepcopy(critic).requires_grad_(False)
    target.normalizer = policy.normalizer
    return critic, target


def optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, collective=None) -> None:
    """Backward and step; with a data-parallel ``collective`` the gradients are averaged over ranks first (one
    all_reduce of their concatenation)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if collective is not None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        flat = collective.average_(torch.cat([grad.reshape(-1) for grad in grads]))
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
    optimizer.step()


@contextlib.contextmanager
def frozen(module: torch.nn.Module) -> Iterator[None]:
    """The module's parameters take no gradient inside (an actor step through the critics)."""
    parameters = list(module.parameters())
    for p in parameters:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in parameters:
            p.requires_grad_(True)


def critic_objective(batch: dict[str, torch.Tensor], y: torch.Tensor, scale: float) -> Callable:
    """objective(critic) -> (loss, (td_error [B], mean Q)): the critics regressed on the target y [B]."""

    def objective(critic):
        q = critic(batch["obs"], batch["action"])  # [C, B]
        loss, td_error = q_regression_loss(q, y, batch["weights"], scale=scale)
        return loss, (td_error, q.mean())

    return objective


def sac_update(parts, batch: dict[str, torch.Tensor], next_noise, noise, target_entropy: float, tau: float) -> dict:
    """One SAC update: soft target, critic step, actor step, temperature step (``parts.auto_temperature``), Polyak.

    ``next_noise`` and ``noise`` [B, A] are the standard normals of the reparameterized actions at s' and s."""
    obs = batch["obs"]
    alpha = parts.alpha()

    def soft_target() -> torch.Tensor:
        next_action, next_log_prob = parts.actor(batch["next_obs"], next_noise)
        next_q = parts.target_critic(batch["next_obs"], next_action)  # [C, B]
        return soft_q_target(batch["reward"], batch["discount"], batch["terminated"], next_q, next_log_prob, alpha)

    y = parts.without_gradient(soft_target)
    critic_loss, (td_error, q_mean) = parts.critic_step(critic_objective(batch, y, scale=0.5))

    def actor_objective(actor):
        action, log_prob = actor(obs, noise)
        return sac_actor_loss(parts.critic(obs, action), log_prob, alpha), log_prob

    actor_loss, log_prob = parts.actor_step(actor_objective, has_aux=True)
    metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha": alpha,
               "entropy": -log_prob.mean(), "q_mean": q_mean, "td_error": td_error}  # fmt: skip
    if parts.auto_temperature:
        metrics["alpha_loss"] = parts.alpha_step(
            lambda log_alpha: temperature_loss(log_alpha, log_prob, target_entropy)
        )
    parts.polyak(tau)
    return metrics


def td3_update(parts, batch: dict[str, torch.Tensor], noise, update_actor: bool, smoothing, tau: float) -> dict:
    """One TD3 (or DDPG) update: smoothed clipped double-Q target and critic step; every ``policy_delay``-th update
    (``update_actor``) also the actor step and the Polyak averaging of target critics and target actor.

    ``noise`` [B, A] is the smoothing's standard normal (None without smoothing); ``smoothing`` is (noise std,
    noise clip, action low, action high) in the action's units."""
    noise_std, noise_clip, low, high = smoothing

    def smoothed_target() -> torch.Tensor:
        next_action = smoothed_target_action(
            parts.target_actor(batch["next_obs"]), noise_std, noise_clip, low, high, standard_normal=noise
        )
        next_q = parts.target_critic(batch["next_obs"], next_action)  # [C, B]
        return soft_q_target(batch["reward"], batch["discount"], batch["terminated"], next_q)

    y = parts.without_gradient(smoothed_target)
    critic_loss, (td_error, q_mean) = parts.critic_step(critic_objective(batch, y, scale=1.0))
    metrics = {"critic_loss": critic_loss, "q_mean": q_mean, "td_error": td_error}
    if update_actor:
        obs = batch["obs"]
        metrics["actor_loss"] = parts.actor_step(
            lambda actor: deterministic_actor_loss(parts.critic(obs, actor(obs))[0])
        )
        parts.polyak(tau)
    return metrics


class EagerParts:
    """The update's parts on an algorithm's own modules: autograd, torch's optimizers, eager Polyak averaging.

    ``actor_method`` is the policy's method the update calls (``rsample`` for SAC, ``mean_action`` for TD3);
    ``target_actor`` pairs the target policy's averaged parameters with the actor's (TD3), or is None (SAC).
    """

    def __init__(self, algorithm, actor_method: str, target_actor: tuple[list, list] | None = None) -> None:
        self.algorithm, self.actor_method, self.target_actor_pairs = algorithm, actor_method, target_actor
        self.auto_temperature = getattr(algorithm, "auto_temperature", False)

    def actor(self, obs: torch.Tensor, *noise) -> torch.Tensor:
        return getattr(self.algorithm.policy, self.actor_method)(obs, *noise)

    def target_actor(self, obs: torch.Tensor) -> torch.Tensor:
        return getattr(self.algorithm.target_policy, self.actor_method)(obs)

    def critic(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.algorithm.critic(obs, action)

    def target_critic(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.algorithm.target_critic(obs, action)

    def alpha(self) -> torch.Tensor:
        return self.algorithm.log_alpha.detach().exp()

    def without_gradient(self, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return compute()

    def critic_step(self, objective: Callable):
        algorithm = self.algorithm
        loss, (td_error, q_mean) = objective(algorithm.critic)
        optimizer_step(algorithm.critic_optimizer, loss, algorithm.collective)
        return loss.detach(), (td_error, q_mean.detach())

    def actor_step(self, objective: Callable, has_aux: bool = False):
        algorithm = self.algorithm
        with frozen(algorithm.critic):
            out = objective(self.actor)
            loss, aux = out if has_aux else (out, None)
            optimizer_step(algorithm.actor_optimizer, loss, algorithm.collective)
        return (loss.detach(), aux.detach()) if has_aux else loss.detach()

    def alpha_step(self, objective: Callable) -> torch.Tensor:
        algorithm = self.algorithm
        loss = objective(algorithm.log_alpha)
        optimizer_step(algorithm.alpha_optimizer, loss, algorithm.collective)
        return loss.detach()

    def polyak(self, tau: float) -> None:
        algorithm = self.algorithm
        polyak_update(algorithm.target_critic.parameters(), algorithm.critic.parameters(), tau)
        if self.target_actor_pairs is not None:
            polyak_update(*self.target_actor_pairs, tau)
