"""TD3's target, losses and two whole updates (policy delay 2) against Stable-Baselines3's (builders and the
conventions compared: sb3_offpolicy_parity.py)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("stable_baselines3")

from sb3_offpolicy_parity import (  # noqa: E402
    BATCH,
    LOSS_ATOL,
    SEED,
    WEIGHT_ATOL,
    assert_close,
    assert_same_weights,
    copy_weights,
    fill_robopt,
    fill_sb3,
    fixed_batch,
    moved,
    robopt_loop,
    sb3_model,
    snapshot,
    td3_pairs,
)
from stable_baselines3 import TD3 as SB3TD3  # noqa: E402

from robopt.core.q_losses import deterministic_actor_loss, q_regression_loss, smoothed_target_action, soft_q_target  # noqa: E402

# ------------------------------------------------------------------------------------------------ TD3


def td3_models(compile_update: bool = False):
    model = sb3_model(SB3TD3, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5)
    loop = robopt_loop("td3", compile_update)
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
                algorithm.target_policy.mean_action(batch["next_obs"]),
                config.target_noise * scale,
                config.target_noise_clip * scale,
                algorithm.low,
                algorithm.high,
                torch.Generator().manual_seed(SEED + 2),
            )
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


@pytest.mark.parametrize(
    "compile_update", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"]
)
def test_two_td3_updates_match_sb3(monkeypatch, compile_update):
    """Update 1 trains the critics only (policy_delay 2); update 2 the critics, the actor and both targets.

    The smoothing noise comes from the global torch RNG on both sides, seeded alike before each update (the
    compiled update draws it outside its graph, as the eager one does).
    """
    model, loop = td3_models(compile_update)
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
