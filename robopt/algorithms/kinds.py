"""How an algorithm becomes a loop: ``AlgorithmSpec`` and one builder per loop kind (DESIGN.md section 7).

Every algorithm is built the same way: ``spec.build(config, env, policy, seed, collective) -> loop``, where the
loop has ``iteration(progress) -> metrics``, ``state_dict()`` and ``load_state_dict()``. An on-policy algorithm
names its update's constructor (``make(algo_config, policy, critic)``) and ``on_policy`` wraps it in the value
critic and ``OnPolicyLoop``; an off-policy or pretraining algorithm names its loop's constructor
(``make(algo_config, env, policy, seed, env_id)``) and ``own_loop`` calls it.

An on-policy run of a policy kind with a variant (``PolicySpec.on_policy``: the language kind's group sampling and
token terms) gets that variant's loop hooks, and its policy-loss terms when the update takes a ``loss_terms``
keyword (PPO's); any other run gets the loop's neutral hooks and no terms.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from robopt.algorithms.onpolicy import OnPolicyLoop
from robopt.distributed.collective import LOCAL, Collective
from robopt.options import ConfigError
from robopt.policies import POLICIES
from robopt.policies.critics import ValueCritic
from robopt.policies.recurrent import RecurrentValueCritic, policy_memory

__all__ = ["AlgorithmSpec", "build_critic", "on_policy", "on_policy_variant", "own_loop", "privileged_dim"]


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm the runner can build: its config dataclass, ``build(config, env, policy, seed, collective) ->
    loop``, its ``kind`` (``on_policy``, ``off_policy``, ``pretrain``), a one-line summary, and whether its update
    replays a recurrent policy's sequences (``sequences``: it takes a policy with memory)."""

    config_cls: type
    build: Callable
    kind: str
    summary: str
    sequences: bool = False


def on_policy(make: Callable) -> Callable:
    """``build`` of an on-policy algorithm: the value critic, ``make(algo_config, policy, critic)`` (the update) and
    the ``OnPolicyLoop`` that calls it."""

    def build(config, env, policy, seed: int = 0, collective: Collective = LOCAL) -> OnPolicyLoop:
        critic = build_critic(config, env)
        adds_loss_terms = "loss_terms" in inspect.signature(make).parameters  # PPO's update does, TRPO's does not
        hooks, loss_terms = on_policy_variant(config, env, adds_loss_terms)
        algorithm = make(config.algo, policy, critic, **({} if loss_terms is None else {"loss_terms": loss_terms}))
        symmetry = getattr(config.algo, "symmetry", None)
        if symmetry is not None and symmetry.enabled:  # PPO's (and its variants'): mirrored transitions
            if not hasattr(algorithm, "use_symmetry"):
                raise ConfigError(f"algo.symmetry: {type(algorithm).__name__} does not take symmetry (PPO does)")
            algorithm.use_symmetry(env, config.critic.privileged)
        frozen_statistics = bool(config.init_from) and config.init_normalizer == "frozen"
        return OnPolicyLoop(
            env,
            policy,
            critic,
            algorithm,
            config.rollout,
            seed=seed,
            critic_warmup=config.critic_warmup,
            privileged=config.critic.privileged,
            update_policy_normalizer=not frozen_statistics,
            collective=collective,
            hooks=hooks,
            update_threads=config.update_threads,
        )

    build.make = make  # the update's constructor, for scripts that assemble a loop by hand (benchmarks/fpo_cost.py)
    return build


def on_policy_variant(config, env, adds_loss_terms: bool) -> tuple[object | None, Callable | None]:
    """(loop hooks, policy-loss terms) of the run's policy kind (``PolicySpec.on_policy``), or (None, None): the
    loop's neutral hooks and no terms. ``adds_loss_terms``: whether the update takes policy-loss terms.

    A config section that only another kind's variant reads (``PolicySpec.sections``: the language kind's ``group``),
    set away from its defaults, would be ignored: a one-line ConfigError.
    """
    name = config.policy.name
    spec = POLICIES[name]
    for other_name, other in POLICIES.items():
        for section in set(other.sections) - set(spec.sections):
            value = getattr(config, section, None)  # None: a composition root without that section
            if value is not None and value != type(value)():
                raise ConfigError(
                    f"{section}: options of policy.name={other_name} runs, which policy.name={name} does not read; "
                    f"leave the {section} section out"
                )
    if spec.on_policy is None:
        return None, None
    return spec.on_policy(config, env, adds_loss_terms)


def own_loop(make: Callable) -> Callable:
    """``build`` of an algorithm that owns its loop: ``make(algo_config, env, policy, seed, env_id)`` (the off-policy
    loop with its replay buffer, or behaviour cloning's epochs over a dataset)."""

    def build(config, env, policy, seed: int = 0, collective: Collective = LOCAL):
        return make(config.algo, env, policy, seed=seed, env_id=config.env.id)

    build.make = make
    return build


def build_critic(config, env) -> torch.nn.Module:
    """V(obs) [B], or V(cat(obs, privileged_obs)) with ``critic.privileged`` (input D + P, its own normalizer); with
    ``policy.recurrent`` a recurrent critic of the same cell."""
    c = config.critic
    input_dim = env.obs_dim + (privileged_dim(config, env) if c.privileged else 0)
    memory = policy_memory(config.policy)
    if memory is not None:  # its own torso of the actor's kind (rsl_rl's and SB3-contrib's)
        critic = RecurrentValueCritic(
            input_dim,
            memory,
            c.hidden,
            c.activation,
            normalize_obs=config.policy.normalize_obs,
            orthogonal_init=config.policy.orthogonal_init,
        )
        return critic.to(config.device)
    critic = ValueCritic(
        input_dim,
        c.hidden,
        c.activation,
        normalize_obs=getattr(config.policy, "normalize_obs", True),
        orthogonal_init=getattr(config.policy, "orthogonal_init", True),
    )
    return critic.to(config.device)


def privileged_dim(config, env) -> int:
    """P of ``env.privileged_obs()`` for ``critic.privileged``; an env without any is a one-line ConfigError."""
    if not hasattr(env, "privileged_obs"):
        raise ConfigError(
            f"critic.privileged=true needs a native env with privileged observations (env.id=mujoco/<Task>); "
            f"{config.env.id} on {type(env).__name__} has none"
        )
    if env.privileged_dim < 1:
        raise ConfigError(
            f"critic.privileged=true needs env.kwargs.randomization with at least one of body_mass, geom_friction, "
            f"dof_damping, actuator_gain (motor_strength), action_delay, push_force on; {config.env.id} has none"
        )
    return env.privileged_dim
