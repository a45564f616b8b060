"""What the off-policy algorithms build around the loop: the replay buffer a schedule describes (size, sampler,
n-step or hindsight transforms), Q critics with their target copy, the optimizer step (gradients averaged over the
ranks of a data-parallel run) and ``frozen`` (a module that takes no gradient inside).

Shapes: N envs, D obs dim, A action dim. ``schedule`` is an ``robopt.algorithms.offpolicy.OffPolicySchedule``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch

from robopt.buffers.replay import ReplayBuffer
from robopt.options import ConfigError

__all__ = ["build_replay", "check_replay_policy", "frozen", "hindsight_transform", "optimizer_step", "q_critics"]
__all__ += ["replay_transforms"]


def build_replay(schedule, gamma: float, env) -> ReplayBuffer:
    """The replay buffer ``schedule`` describes (size, sampler, n-step or hindsight) for discount ``gamma``.

    The loop feeds the policy's observation normalizer (when enabled) every observation it collects; the
    replay keeps raw observations, normalized by the networks with the current statistics when sampled.
    """
    from robopt.buffers.replay import ReplayStorage
    from robopt.buffers.samplers import PrioritizedSampler, UniformSampler

    per_env = max(1, -(-schedule.buffer_size // env.num_envs))
    storage = ReplayStorage(per_env, env.num_envs, env.obs_dim, env.action_dim, device=env.device)
    if schedule.sampler == "prioritized":
        sampler = PrioritizedSampler(
            storage.capacity, schedule.priority_alpha, schedule.priority_beta, device=env.device
        )
    else:
        sampler = UniformSampler(storage.capacity, device=env.device)
    transforms = replay_transforms(schedule, gamma, env)
    return ReplayBuffer(storage, sampler, transforms, gamma=gamma, batch_size=schedule.batch_size)


def check_replay_policy(policy) -> None:
    """Refuse a ``policy`` whose observation normalizer is enabled where no loop feeds it (the fleet's learner)."""
    if policy is not None and policy.normalizer.enabled:
        raise ConfigError(
            "policy.normalize_obs=true is not supported by the fleet yet (its learner does not update the "
            "normalizer); set policy.normalize_obs=false"
        )


def replay_transforms(schedule, gamma: float, env) -> tuple:
    """The sample-time transforms ``schedule`` asks for: hindsight relabelling, n-step returns, or none."""
    from robopt.buffers.transforms import NStep

    if schedule.her_strategy != "none":
        return (hindsight_transform(schedule, env),)
    return (NStep(schedule.n_step, gamma),) if schedule.n_step > 1 else ()


def hindsight_transform(schedule, env):
    """HER over the env's goal slices and vectorized ``compute_reward``, checked once on the reset observation."""
    from robopt.buffers.transforms import Hindsight

    if not hasattr(env, "compute_reward"):
        raise ConfigError(
            f"algo.loop.her_strategy={schedule.her_strategy} needs a goal-conditioned env (achieved and desired goals, "
            f"compute_reward), such as mujoco/GripperReach or mujoco/GripperPush; {env.env_id} has no goals"
        )
    obs = env.reset()  # [N, D]: the loop resets again with its seed
    reward = env.compute_reward(achieved_goal=obs[:, env.achieved_goal], desired_goal=obs[:, env.desired_goal])
    if not isinstance(reward, torch.Tensor) or tuple(reward.shape) != (env.num_envs,):
        shape = list(reward.shape) if isinstance(reward, torch.Tensor) else type(reward).__name__
        raise ConfigError(f"{env.env_id}: compute_reward must return one reward per row, [{env.num_envs}]; got {shape}")
    return Hindsight(env.compute_reward, env.achieved_goal, env.desired_goal, schedule.her_strategy, schedule.her_k)


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
