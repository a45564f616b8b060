"""Update parity of robopt's SAC and TD3 with Stable-Baselines3's: same weights, batch and noise, same numbers.

SB3's networks are copied into robopt's: the actor's hidden layers onto ``mean_net``; SAC's ``mu`` and ``log_std``
heads stacked row-wise into robopt's last layer of 2A outputs [mean | log_std] (``state_dependent_std``); TD3's
``mu`` (ending in tanh) onto the mean net of robopt's squashed policy; ``qf0``/``qf1`` onto ``critic.nets[0/1]``
and the target networks likewise. One fixed batch goes into both replay buffers (SB3's ``ReplayBuffer.add``
with ``TimeLimit.truncated`` infos, robopt's ``ReplayBuffer.extend``) and each library reads it back through
its own buffer: terminated rows stop the bootstrap, truncated rows bootstrap on both sides.

Noise: SAC's reparameterization noise is served from a fixed list on both sides; SB3 draws it through
``torch.distributions.normal._standard_normal`` (current obs first, then next obs), robopt through
``torch.randn_like`` (next obs first, then current obs). TD3's smoothing noise comes from the global torch RNG
on both sides (SB3's ``Tensor.normal_(0, 0.2)``, robopt's ``torch.randn * 0.2``), seeded alike.

Action scaling: HalfCheetah-v5's action bounds are [-1, 1], so SB3's scaled actions (what its buffer stores and
its critics read) and robopt's env-unit actions are the same numbers, and robopt's squash Jacobian term
log((high - low) / 2) is 0. With other bounds the two would not compare directly: robopt's critics read env-unit
actions and its log pi includes that Jacobian term, SB3's critics and log pi work on the [-1, 1] scaled action.

One measured difference: SB3's squash correction is log(1 - tanh(u)^2 + 1e-6), robopt's the exact
2 (log 2 - u - softplus(-2u)); the epsilon moves SB3's log pi by sum_A log(1 + 1e-6 / (1 - tanh(u)^2)), ~1e-4 at
these weights. The tests set SB3's epsilon to 0 where they compare log-probs and losses tightly, and check the
epsilon's shift and its (small) effect on an update separately.

SAC's update order differs (SB3: temperature, critic, actor, targets; robopt: critic, actor, temperature,
targets) but not its arithmetic: both use alpha = exp(log_alpha) from before its step everywhere and one
reparameterized sample of the not-yet-updated actor for both the actor and the temperature loss. So two updates
agree weight for weight. Adam's steps are invariant to a loss's scale, so the losses themselves (SB3's logged
``train/*`` values) are compared too: that is what pins SAC's 0.5 and TD3's 1.0 on the summed critic MSEs.

Shapes: B batch, D = 17 obs dim, A = 6 action dim, C = 2 critics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

import torch.distributions.normal as torch_normal  # noqa: E402
from stable_baselines3 import SAC as SB3SAC  # noqa: E402
from stable_baselines3 import TD3 as SB3TD3  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402

from robopt.config import ExperimentConfig, build_dataclass  # noqa: E402
from robopt.core.q_losses import (  # noqa: E402
    deterministic_actor_loss,
    q_regression_loss,
    sac_actor_loss,
    smoothed_target_action,
    soft_q_target,
    temperature_loss,
)
from robopt.runner import build_loop  # noqa: E402

ENV_ID = "HalfCheetah-v5"  # action bounds [-1, 1]: SB3's scaled actions are the env's
SEED, BATCH, HIDDEN = 5, 64, [32, 32]
# Tolerances are a few times the float32 rounding seen; a convention error (a missing alpha, 1.0 instead of 0.5
# on the critic MSE, the post-step alpha, a min over critics in TD3's actor loss) moves these by 1e-3 to 1.
LOSS_ATOL = 3e-5  # targets and losses of order 1-10; seen 9e-6 (SB3's float32 1 - tanh(u)^2 cancels at |u| ~ 3)
WEIGHT_ATOL = 1e-6  # weights after updates (Adam lr 3e-4 or 1e-3 per step); seen 2e-7 (SAC), 1.5e-8 (TD3)
EPSILON_LOSS_ATOL = 1e-4  # logged SAC losses with SB3's epsilon 1e-6 kept; seen 3e-5
EPSILON_WEIGHT_ATOL = 1e-5  # weights after two SAC updates with SB3's epsilon kept; seen 1.7e-6


# --------------------------------------------------------------------------------------------- builders


def robopt_loop(algo: str):
    """robopt's SAC or TD3 loop with SB3's defaults at a small size (relu 32x32, default init, no obs norm)."""
    policy = {"name": "gaussian", "squash": True, "hidden": HIDDEN, "activation": "relu", "normalize_obs": False,
              "orthogonal_init": False, "state_dependent_std": algo == "sac", "log_std_init": 0.0}  # fmt: skip
    loop = {"learning_starts": 0, "batch_size": BATCH, "buffer_size": BATCH}
    data = {"seed": SEED, "env": {"id": ENV_ID, "num_envs": 1}, "policy": policy,
            "algo": {"name": algo, "critic_hidden": HIDDEN, "critic_activation": "relu", "loop": loop}}  # fmt: skip
    return build_loop(build_dataclass(ExperimentConfig, data))


def sb3_model(cls, **kwargs):
    """SB3's SAC or TD3 with its defaults but net_arch [32, 32]; its logger keeps train()'s losses."""
    model = cls("MlpPolicy", ENV_ID, policy_kwargs={"net_arch": HIDDEN}, buffer_size=BATCH, learning_starts=0,
                batch_size=BATCH, seed=SEED, device="cpu", **kwargs)  # fmt: skip
    model.set_logger(configure(None, []))  # train() records into logger.name_to_value
    return model


def fixed_batch(obs_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    """B float32 transitions; rows 0 mod 4 terminated (16), rows 1 mod 8 truncated (8)."""
    generator = torch.Generator().manual_seed(SEED)
    rows = torch.arange(BATCH)
    return {
        "obs": torch.randn(BATCH, obs_dim, generator=generator),
        "action": torch.rand(BATCH, action_dim, generator=generator) * 1.98 - 0.99,
        "reward": torch.randn(BATCH, generator=generator),
        "next_obs": torch.randn(BATCH, obs_dim, generator=generator),
        "terminated": rows % 4 == 0,
        "truncated": rows % 8 == 1,
    }


def fill_sb3(model, batch: dict[str, torch.Tensor], monkeypatch) -> None:
    """The batch into SB3's replay buffer (done = terminated or truncated), sampled back whole and in order."""
    buffer = model.replay_buffer
    for i in range(BATCH):
        row = {name: value[i : i + 1].numpy() for name, value in batch.items()}
        truncated = bool(row["truncated"][0])
        done = np.array([bool(row["terminated"][0]) or truncated])
        buffer.add(
            row["obs"], row["next_obs"], row["action"], row["reward"], done, [{"TimeLimit.truncated": truncated}]
        )
    assert buffer.full
    monkeypatch.setattr(buffer, "sample", lambda batch_size, env=None: buffer._get_samples(np.arange(batch_size)))


def fill_robopt(replay, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch into robopt's replay buffer, gathered back whole and in order."""
    fields = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    for i in range(BATCH):
        replay.extend(*(batch[name][i : i + 1] for name in fields))
    return replay.gather(torch.arange(BATCH))


def linear_pairs(name: str, sb3_layers, robopt_layers) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, SB3 tensor, robopt tensor) for the weight and bias of matching nn.Linear layers."""
    sb3_layers = [layer for layer in sb3_layers if isinstance(layer, torch.nn.Linear)]
    pairs = []
    for i, (source, target) in enumerate(zip(sb3_layers, robopt_layers, strict=True)):
        pairs += [(f"{name} {i} weight", source.weight, target.weight), (f"{name} {i} bias", source.bias, target.bias)]
    return pairs


def critic_pairs(name: str, sb3_critic, critic) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    pairs = []
    for c, q_net in enumerate(sb3_critic.q_networks):
        pairs += linear_pairs(f"{name} {c}", q_net, critic.nets[c].layers)
    return pairs


def sac_pairs(model, loop) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every SAC parameter; SB3's mu and log_std heads are the row blocks [:A] and [A:] of robopt's last layer."""
    actor, algorithm, action_dim = model.actor, loop.algorithm, loop.policy.action_dim
    layers = loop.policy.mean_net.layers
    pairs = linear_pairs("actor", actor.latent_pi, layers[: len(HIDDEN)])
    last = layers[len(HIDDEN)]
    for j, head in enumerate((actor.mu, actor.log_std)):
        rows = slice(j * action_dim, (j + 1) * action_dim)  # views: they follow Adam's in-place steps
        pairs += [(f"actor head {j} weight", head.weight, last.weight[rows]),
                  (f"actor head {j} bias", head.bias, last.bias[rows])]  # fmt: skip
    pairs += critic_pairs("critic", model.critic, algorithm.critic)
    pairs += critic_pairs("target critic", model.critic_target, algorithm.target_critic)
    return pairs + [("log_alpha", model.log_ent_coef.reshape(()), algorithm.log_alpha)]


def td3_pairs(model, loop) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    algorithm = loop.algorithm
    pairs = linear_pairs("actor", model.actor.mu, loop.policy.mean_net.layers)
    pairs += linear_pairs("target actor", model.actor_target.mu, algorithm.target_policy.mean_net.layers)
    pairs += critic_pairs("critic", model.critic, algorithm.critic)
    return pairs + critic_pairs("target critic", model.critic_target, algorithm.target_critic)


@torch.no_grad()
def copy_weights(pairs) -> None:
    for _, source, target in pairs:
        target.copy_(source.reshape(target.shape))


def differences(pairs) -> dict[str, float]:
    """Max |SB3 - robopt| per tensor."""
    return {name: float((source.detach().reshape(target.shape) - target.detach()).abs().max())
            for name, source, target in pairs}  # fmt: skip


def assert_same_weights(pairs, atol: float, context: str) -> None:
    diff = differences(pairs)
    worst = max(diff, key=diff.get)
    assert diff[worst] < atol, f"{context}: {worst} differs from SB3's by {diff[worst]:.2e}: {diff}"


def snapshot(pairs) -> dict[str, torch.Tensor]:
    return {name: source.detach().clone() for name, source, _ in pairs}


def moved(pairs, before: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max |change| per SB3 tensor since ``before``."""
    return {name: float((source.detach() - before[name]).abs().max()) for name, source, _ in pairs}


def standard_normals(count: int, action_dim: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return [torch.randn(BATCH, action_dim, generator=generator) for _ in range(count)]


def fixed_noise(monkeypatch, sb3_eps: list[torch.Tensor], robopt_eps: list[torch.Tensor]) -> tuple[list, list]:
    """Serve the given standard normals, in order, to SB3's ``Normal.rsample`` and robopt's ``randn_like``.

    Returns the two queues: both must be empty after the calls (each side drew exactly what it was given).
    """
    sb3_queue, robopt_queue = list(sb3_eps), list(robopt_eps)

    def sb3_standard_normal(shape, dtype, device):
        eps = sb3_queue.pop(0)
        assert tuple(eps.shape) == tuple(shape)
        return eps.to(dtype)

    def robopt_randn_like(tensor, *args, **kwargs):
        eps = robopt_queue.pop(0)
        assert eps.shape == tensor.shape
        return eps.to(tensor.dtype)

    monkeypatch.setattr(torch_normal, "_standard_normal", sb3_standard_normal)
    monkeypatch.setattr(torch, "randn_like", robopt_randn_like)
    return sb3_queue, robopt_queue


def assert_close(name: str, ours: torch.Tensor, theirs: torch.Tensor, atol: float = LOSS_ATOL) -> None:
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------------------------ SAC


def test_sac_squashed_gaussian_matches_sb3(monkeypatch):
    """mean, log-std (clamped head), tanh action and log pi of robopt's policy against SB3's Actor."""
    model, loop = sb3_model(SB3SAC), robopt_loop("sac")
    try:
        copy_weights(sac_pairs(model, loop))
        obs = fixed_batch(loop.env.obs_dim, loop.env.action_dim)["obs"]
        (eps,) = standard_normals(1, loop.env.action_dim)
        with torch.no_grad():
            mean, log_std = loop.policy.distribution_params(obs)
            sb3_mean, sb3_log_std, _ = model.actor.get_action_dist_params(obs)
            fixed_noise(monkeypatch, [eps, eps], [eps])
            action, log_prob = loop.policy.rsample(obs)
            sb3_action, sb3_log_prob = model.actor.action_log_prob(obs)  # SB3's default epsilon 1e-6
            model.actor.action_dist.epsilon = 0.0
            _, sb3_exact = model.actor.action_log_prob(obs)
    finally:
        loop.env.close()
    assert_close("mean", mean, sb3_mean, 1e-6)
    assert_close("log_std", log_std, sb3_log_std, 1e-6)
    assert_close("action", action, sb3_action, 1e-6)
    assert_close("log-prob (SB3 epsilon 0)", log_prob, sb3_exact)  # seen 4.8e-6 on values of ~6
    # SB3's epsilon shifts log pi by -sum_A [log(1 - a^2 + 1e-6) - log(1 - a^2)], worked out here in float64
    a = sb3_action.double()
    shift = (torch.log(1 - a.square() + 1e-6) - torch.log(1 - a.square())).sum(-1)  # [B]
    assert_close("log-prob (SB3 epsilon 1e-6)", log_prob.double() - shift, sb3_log_prob.double())
    assert float(shift.max()) > 3e-5  # the shift is real at these weights (seen 1e-4), not below the tolerance


def test_sac_target_and_losses_match_sb3(monkeypatch):
    """robopt's pure losses on robopt's networks against SB3's ``SAC.train`` formulas on SB3's networks."""
    model, loop = sb3_model(SB3SAC), robopt_loop("sac")
    algorithm, policy = loop.algorithm, loop.policy
    try:
        copy_weights(sac_pairs(model, loop))
        with torch.no_grad():
            model.log_ent_coef.fill_(-0.7)  # alpha = 0.497: the entropy terms count, the temperature loss is not 0
            algorithm.log_alpha.fill_(-0.7)
        model.actor.action_dist.epsilon = 0.0
        batch = fill_robopt(loop.replay, fixed_batch(loop.env.obs_dim, loop.env.action_dim))
        fill_sb3(model, batch, monkeypatch)
        data = model.replay_buffer.sample(BATCH)
        eps_obs, eps_next = standard_normals(2, loop.env.action_dim)
        fixed_noise(monkeypatch, [eps_obs, eps_next], [eps_next, eps_obs])
        # SB3, as sac.py's train: temperature loss, target, 0.5 * sum of the critics' MSEs, actor loss
        sb3_action, sb3_log_prob = model.actor.action_log_prob(data.observations)
        alpha = model.log_ent_coef.detach().exp()
        sb3_alpha_loss = -(model.log_ent_coef * (sb3_log_prob + model.target_entropy).detach()).mean()
        with torch.no_grad():
            next_action, next_log_prob = model.actor.action_log_prob(data.next_observations)
            next_q = torch.cat(model.critic_target(data.next_observations, next_action), dim=1).min(1).values
            sb3_target = data.rewards[:, 0] + (1 - data.dones[:, 0]) * model.gamma * (next_q - alpha * next_log_prob)
        sb3_q = model.critic(data.observations, data.actions)
        sb3_critic_loss = 0.5 * sum(torch.nn.functional.mse_loss(q[:, 0], sb3_target) for q in sb3_q)
        sb3_pi_q = torch.cat(model.critic(data.observations, sb3_action), dim=1).min(1).values
        sb3_actor_loss = (alpha * sb3_log_prob - sb3_pi_q).mean()
        # robopt, as SAC.update computes them
        robopt_alpha = algorithm.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = policy.rsample(batch["next_obs"])
            next_q = algorithm.target_critic(batch["next_obs"], next_action)  # [C, B]
            target = soft_q_target(batch["reward"], batch["discount"], batch["terminated"], next_q, next_log_prob,
                                   robopt_alpha)  # fmt: skip
        critic_loss, _ = q_regression_loss(algorithm.critic(batch["obs"], batch["action"]), target, batch["weights"])
        action, log_prob = policy.rsample(batch["obs"])
        actor_loss = sac_actor_loss(algorithm.critic(batch["obs"], action), log_prob, robopt_alpha)
        alpha_loss = temperature_loss(algorithm.log_alpha, log_prob, algorithm.target_entropy)
    finally:
        loop.env.close()
    assert algorithm.target_entropy == model.target_entropy == -6.0
    assert float(data.dones.sum()) == int(batch["terminated"].sum()) == 16  # SB3 drops truncated rows' dones too
    assert_close("target Q", target, sb3_target)  # seen 9e-6 on values up to 4.6
    assert_close("critic loss", critic_loss, sb3_critic_loss)  # seen 5e-7 on 3.2
    assert_close("actor loss", actor_loss, sb3_actor_loss)  # seen 0 on 2.0
    assert_close("temperature loss", alpha_loss, sb3_alpha_loss)  # seen 0 on 7.0


@pytest.mark.parametrize(
    ("sb3_epsilon", "loss_atol", "weight_atol"),
    [(0.0, LOSS_ATOL, WEIGHT_ATOL), (1e-6, EPSILON_LOSS_ATOL, EPSILON_WEIGHT_ATOL)],
    ids=["exact-squash", "sb3-epsilon"],
)
def test_two_sac_updates_match_sb3(monkeypatch, sb3_epsilon, loss_atol, weight_atol):
    """SB3's ``train(gradient_steps=2)`` and two robopt ``SAC.update``: logged losses and every weight after,
    including log_alpha and the Polyak-averaged target critics. alpha starts at exp(-0.7) on both sides."""
    model, loop = sb3_model(SB3SAC), robopt_loop("sac")
    try:
        pairs = sac_pairs(model, loop)
        copy_weights(pairs)
        with torch.no_grad():
            model.log_ent_coef.fill_(-0.7)
            loop.algorithm.log_alpha.fill_(-0.7)
        model.actor.action_dist.epsilon = sb3_epsilon
        batch = fill_robopt(loop.replay, fixed_batch(loop.env.obs_dim, loop.env.action_dim))
        fill_sb3(model, batch, monkeypatch)
        obs_1, next_1, obs_2, next_2 = standard_normals(4, loop.env.action_dim)
        queues = fixed_noise(monkeypatch, [obs_1, next_1, obs_2, next_2], [next_1, obs_1, next_2, obs_2])
        before = snapshot(pairs)
        model.train(gradient_steps=2, batch_size=BATCH)
        metrics = [loop.algorithm.update(batch, progress=0.0) for _ in range(2)]
    finally:
        loop.env.close()
    assert queues == ([], []), "each side must draw exactly two noise batches per update"
    change = moved(pairs, before)
    assert min(change.values()) > 1e-6, f"SB3's updates left a tensor unmoved: {change}"
    logged = model.logger.name_to_value  # SB3 logs the mean over its gradient steps
    for name, key in (("critic_loss", "critic_loss"), ("actor_loss", "actor_loss"), ("alpha_loss", "ent_coef_loss")):
        ours = (float(metrics[0][name]) + float(metrics[1][name])) / 2
        assert abs(ours - logged[f"train/{key}"]) < loss_atol, f"{name}: robopt {ours}, SB3 {logged[f'train/{key}']}"
    assert_same_weights(pairs, weight_atol, "two SAC updates")


# ------------------------------------------------------------------------------------------------ TD3


def td3_models():
    model = sb3_model(SB3TD3, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5)
    loop = robopt_loop("td3")
    copy_weights(td3_pairs(model, loop))
    return model, loop


def test_td3_target_and_losses_match_sb3(monkeypatch):
    """robopt's smoothed target, critic loss (scale 1) and actor loss -Q_1(s, mu(s)) against SB3's formulas."""
    model, loop = td3_models()
    algorithm, config = loop.algorithm, loop.algorithm.config
    try:
        batch = fill_robopt(loop.replay, fixed_batch(loop.env.obs_dim, loop.env.action_dim))
        fill_sb3(model, batch, monkeypatch)
        data = model.replay_buffer.sample(BATCH)
        noise = torch.randn(BATCH, loop.env.action_dim, generator=torch.Generator().manual_seed(SEED + 2))
        # SB3, as td3.py's train: clip(mu'(s') + clip(0.2 eps, -0.5, 0.5), -1, 1), sum of MSEs, -mean Q_1(s, mu(s))
        with torch.no_grad():
            next_action = (model.actor_target(data.next_observations) + (0.2 * noise).clamp(-0.5, 0.5)).clamp(-1, 1)
            next_q = torch.cat(model.critic_target(data.next_observations, next_action), dim=1).min(1).values
            sb3_target = data.rewards[:, 0] + (1 - data.dones[:, 0]) * model.gamma * next_q
        sb3_q = model.critic(data.observations, data.actions)
        sb3_critic_loss = sum(torch.nn.functional.mse_loss(q[:, 0], sb3_target) for q in sb3_q)
        sb3_actor_loss = -model.critic.q1_forward(data.observations, model.actor(data.observations)).mean()
        # robopt, as TD3.update computes them (noise in half-ranges: the half-range is 1 here)
        scale = float(algorithm.half_range.mean())
        with torch.no_grad():
            next_action = smoothed_target_action(
                algorithm.target_policy.mean_action(batch["next_obs"]), config.target_noise * scale,
                config.target_noise_clip * scale, algorithm.low, algorithm.high,
                torch.Generator().manual_seed(SEED + 2),
            )  # fmt: skip
            next_q = algorithm.target_critic(batch["next_obs"], next_action)  # [C, B]
            target = soft_q_target(batch["reward"], batch["discount"], batch["terminated"], next_q)
        critic_loss, _ = q_regression_loss(algorithm.critic(batch["obs"], batch["action"]), target, scale=1.0)
        q_first = algorithm.critic(batch["obs"], loop.policy.mean_action(batch["obs"]))[0]
        actor_loss = deterministic_actor_loss(q_first)
    finally:
        loop.env.close()
    assert scale == 1.0 and float((0.2 * noise).abs().max()) > 0.5  # the noise clip acts
    assert_close("target Q", target, sb3_target)  # seen 6e-8
    assert_close("critic loss", critic_loss, sb3_critic_loss)  # seen 0 on 2.4
    assert_close("actor loss", actor_loss, sb3_actor_loss)  # seen 0 on 0.23


def test_two_td3_updates_match_sb3(monkeypatch):
    """Update 1 trains the critics only (policy_delay 2); update 2 the critics, the actor and both targets.

    The smoothing noise comes from the global torch RNG on both sides, seeded alike before each update.
    """
    model, loop = td3_models()
    try:
        pairs = td3_pairs(model, loop)
        batch = fill_robopt(loop.replay, fixed_batch(loop.env.obs_dim, loop.env.action_dim))
        fill_sb3(model, batch, monkeypatch)
        before = snapshot(pairs)
        logged, metrics = [], []
        for seed in (SEED + 3, SEED + 4):
            torch.manual_seed(seed)
            model.train(gradient_steps=1, batch_size=BATCH)
            logged.append(dict(model.logger.name_to_value))
            torch.manual_seed(seed)
            metrics.append(loop.algorithm.update(batch, progress=0.0))
            if len(logged) == 1:  # after update 1: critics moved, actors and targets did not, on both sides
                change = moved(pairs, before)
                assert all((change[name] > 1e-4) == name.startswith("critic") for name in change), change
                assert_same_weights(pairs, WEIGHT_ATOL, "TD3 update 1 (critics only)")
    finally:
        loop.env.close()
    assert "actor_loss" not in metrics[0] and "train/actor_loss" not in logged[0]
    for i in range(2):
        ours, theirs = float(metrics[i]["critic_loss"]), logged[i]["train/critic_loss"]
        assert abs(ours - theirs) < LOSS_ATOL, f"update {i + 1} critic loss: robopt {ours}, SB3 {theirs}"
    ours, theirs = float(metrics[1]["actor_loss"]), logged[1]["train/actor_loss"]
    assert abs(ours - theirs) < LOSS_ATOL, f"update 2 actor loss: robopt {ours}, SB3 {theirs}"
    change = moved(pairs, before)
    assert min(change.values()) > 1e-6, f"SB3's updates left a tensor unmoved: {change}"
    assert_same_weights(pairs, WEIGHT_ATOL, "two TD3 updates")
