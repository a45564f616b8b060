"""SAC's distribution, target, losses and two whole updates against Stable-Baselines3's (builders and the
conventions compared: sb3_offpolicy_parity.py)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("stable_baselines3")

from sb3_offpolicy_parity import (  # noqa: E402
    BATCH,
    EPSILON_LOSS_ATOL,
    EPSILON_WEIGHT_ATOL,
    LOSS_ATOL,
    WEIGHT_ATOL,
    assert_close,
    assert_same_weights,
    copy_weights,
    fill_robopt,
    fill_sb3,
    fixed_batch,
    fixed_noise,
    moved,
    robopt_loop,
    sac_pairs,
    sb3_model,
    snapshot,
    standard_normals,
)
from stable_baselines3 import SAC as SB3SAC  # noqa: E402

from robopt.core.q_losses import q_regression_loss, sac_actor_loss, soft_q_target, temperature_loss  # noqa: E402

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
            target = soft_q_target(
                batch["reward"], batch["discount"], batch["terminated"], next_q, next_log_prob, robopt_alpha
            )
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
    ("sb3_epsilon", "loss_atol", "weight_atol", "compile_update"),
    [
        (0.0, LOSS_ATOL, WEIGHT_ATOL, False),
        (1e-6, EPSILON_LOSS_ATOL, EPSILON_WEIGHT_ATOL, False),
        pytest.param(0.0, LOSS_ATOL, WEIGHT_ATOL, True, marks=pytest.mark.slow),
    ],
    ids=["exact-squash", "sb3-epsilon", "exact-squash-compiled"],
)
def test_two_sac_updates_match_sb3(monkeypatch, sb3_epsilon, loss_atol, weight_atol, compile_update):
    """SB3's ``train(gradient_steps=2)`` and two robopt ``SAC.update``: logged losses and every weight after,
    including log_alpha and the Polyak-averaged target critics. alpha starts at exp(-0.7) on both sides.
    Also with robopt's compiled update (``algo.compile``), which draws its noise as the eager one does."""
    model, loop = sb3_model(SB3SAC), robopt_loop("sac", compile_update)
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
    assert (loop.algorithm.compiled is not None) == compile_update
    change = moved(pairs, before)
    assert min(change.values()) > 1e-6, f"SB3's updates left a tensor unmoved: {change}"
    logged = model.logger.name_to_value  # SB3 logs the mean over its gradient steps
    for name, key in (("critic_loss", "critic_loss"), ("actor_loss", "actor_loss"), ("alpha_loss", "ent_coef_loss")):
        ours = (float(metrics[0][name]) + float(metrics[1][name])) / 2
        assert abs(ours - logged[f"train/{key}"]) < loss_atol, f"{name}: robopt {ours}, SB3 {logged[f'train/{key}']}"
    assert_same_weights(pairs, weight_atol, "two SAC updates")
