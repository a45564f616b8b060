"""Left-right symmetry in PPO (``algo.symmetry``): mirrored transitions in every minibatch, and a mirror loss.

Shapes: B batch, D obs dim, A action dim, P privileged dim.

A robot whose left and right are mirror images (``robot.mirror``, ``robopt.envs.robot.mirror``) faces the same
problem mirrored: the mirror image s' of a state, taking the mirrored action a', has the same advantage. Two ways to
use that, as rsl_rl's symmetry extension does (Mittal et al. 2024):

- ``augment``: each rollout is doubled with its mirror image before the epochs (observation, action, privileged
  observation mirrored; advantage, return and old value kept), and the minibatches double with it, so an epoch takes
  as many gradient steps as without. The mirrored rows' old log-probabilities are the policy's own at the start of
  the update (where it still is the policy that acted), so their ratios start at exactly 1 as the collected rows'
  do; rsl_rl reuses the collected rows' log-probabilities instead, which is exact only for a policy that is already
  symmetric.
- ``mirror_loss``: coefficient of mean ||mu(s') - mirror(mu(s))||^2 over each minibatch, pulling the policy's mean
  toward a symmetric one.

A Gaussian policy without memory, history window or squashing; the env's mirror must cover every observation term
(and, with a privileged critic, every privileged one). One line, exit 2, for what it cannot mirror.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.buffers.rollout import RolloutBatch
from robopt.core.protocols import memory_width
from robopt.options import NON_NEGATIVE, ConfigError, option

GAUSSIAN_INFO = {"log_prob", "mean", "log_std"}


@dataclass(frozen=True)
class SymmetryConfig:
    augment: bool = option(False, "add each rollout's mirror image to the update (needs robot.mirror)")
    mirror_loss: float = option(
        0.0, "coefficient of the mirror loss ||mu(mirror(s)) - mirror(mu(s))||^2 (0: off)", check=NON_NEGATIVE
    )

    @property
    def enabled(self) -> bool:
        return self.augment or self.mirror_loss > 0


class Symmetry:
    """The env's mirrors and what PPO does with them (the module doc)."""

    def __init__(self, config: SymmetryConfig, env, policy, privileged: bool) -> None:
        from robopt.policies.gaussian import GaussianPolicy

        if not isinstance(policy, GaussianPolicy) or policy.squash:
            raise ConfigError("algo.symmetry supports a Gaussian policy without squash (policy.name=gaussian) for now")
        if memory_width(policy) > 0 or getattr(policy, "history", 1) > 1:
            raise ConfigError("algo.symmetry does not mirror a recurrent policy or a history window yet")
        mirror = getattr(env, "mirror", None)
        if mirror is None:
            raise ConfigError(
                f"algo.symmetry needs an env that knows its mirror image: env.id robot with robot.mirror, got "
                f"{type(env).__name__}"
            )
        try:
            mirrors = mirror()
        except ValueError as error:
            raise ConfigError(f"algo.symmetry: {error}") from None
        if privileged and mirrors.get("privileged") is None:
            raise ConfigError(
                "algo.symmetry with critic.privileged=true needs a mirror of every privileged block; the "
                "randomization's parameters (per body and geom) have none: drop critic.privileged or the symmetry"
            )
        self.config, self.obs, self.action = config, mirrors["obs"], mirrors["action"]
        self.privileged = mirrors.get("privileged") if privileged else None
        if self.obs.perm.numel() != env.obs_dim or self.action.perm.numel() != env.action_dim:
            raise ConfigError(
                f"algo.symmetry: the env's mirror covers {self.obs.perm.numel()} observation and "
                f"{self.action.perm.numel()} action elements, but it has {env.obs_dim} and {env.action_dim} (a "
                "wrapper changed them?)"
            )

    def augment(self, batch: RolloutBatch, policy) -> RolloutBatch:
        """The batch followed by its mirror image (the module doc); a flat batch of 2B rows."""
        unknown = set(batch.policy_info) - GAUSSIAN_INFO
        if unknown:
            raise ConfigError(f"algo.symmetry cannot mirror the policy's stored {sorted(unknown)[0]!r}")
        obs, action = self.obs.apply(batch.obs), self.action.apply(batch.action)
        with torch.no_grad():  # the policy that acted: the mirrored rows' old distribution and log-probability
            mean, log_std = policy.distribution_params(obs)
            log_prob = policy.log_prob(obs, action, {})
        info = {"log_prob": log_prob, "mean": mean, "log_std": log_std.expand_as(mean).clone()}
        critic_obs = None
        if batch.critic_obs is not None:
            width = batch.obs.shape[1]
            critic_obs = torch.cat([obs, self.privileged.apply(batch.critic_obs[:, width:])], dim=1)
        mirrored = RolloutBatch(
            obs=obs,
            action=action,
            policy_info=info,
            value=batch.value,
            advantage=batch.advantage,
            return_target=batch.return_target,
            terminated=batch.terminated,
            truncated=batch.truncated,
            critic_obs=critic_obs,
        )
        return RolloutBatch.cat([batch, mirrored])

    def loss(self, policy, obs: torch.Tensor) -> torch.Tensor:
        """mean ||mu(mirror(s)) - mirror(mu(s))||^2 over the rows of ``obs`` [B, D] (summed over A)."""
        mean, _ = policy.distribution_params(obs)
        mirrored, _ = policy.distribution_params(self.obs.apply(obs))
        return (mirrored - self.action.apply(mean)).square().sum(-1).mean()
