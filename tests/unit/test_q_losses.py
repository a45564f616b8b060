"""Off-policy losses and the twin Q critic against hand-worked numbers and Stable-Baselines3's formulas."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional

from robopt.core.q_losses import (
    deterministic_actor_loss,
    polyak_update,
    q_regression_loss,
    sac_actor_loss,
    smoothed_target_action,
    soft_q_target,
    temperature_loss,
)
from robopt.policies.critics import QCritic


def test_soft_q_target_by_hand():
    reward = torch.tensor([1.0, 2.0, 3.0])
    terminated = torch.tensor([False, True, False])  # the terminated row does not bootstrap; truncation would
    next_q = torch.tensor([[5.0, 7.0, -1.0], [4.0, 9.0, 2.0]])  # min over critics: [4, 7, -1]
    next_log_prob = torch.tensor([-1.0, 0.5, 2.0])
    target = soft_q_target(reward, 0.9, terminated, next_q, next_log_prob, alpha=0.2)
    # row 0: 1 + 0.9 (4 + 0.2); row 1: 2; row 2: 3 + 0.9 (-1 - 0.4)
    torch.testing.assert_close(target, torch.tensor([1 + 0.9 * 4.2, 2.0, 3 + 0.9 * -1.4]))
    # a per-row discount (n-step: gamma^k) and no entropy term (TD3, DDPG)
    target = soft_q_target(reward, torch.tensor([0.5, 0.25, 0.125]), terminated, next_q)
    torch.testing.assert_close(target, torch.tensor([1 + 0.5 * 4, 2.0, 3 - 0.125]))


def test_q_regression_loss_matches_sb3_and_weights():
    torch.manual_seed(0)
    q, target = torch.randn(2, 16, requires_grad=True), torch.randn(16)
    loss, td_error = q_regression_loss(q, target, scale=0.5)
    sb3_sac = 0.5 * sum(functional.mse_loss(current, target) for current in q)  # SB3 SAC's critic loss
    torch.testing.assert_close(loss, sb3_sac)
    loss_td3, _ = q_regression_loss(q, target, scale=1.0)
    torch.testing.assert_close(loss_td3, sum(functional.mse_loss(current, target) for current in q))  # SB3 TD3
    torch.testing.assert_close(td_error, (q.detach().mean(0) - target).abs())
    weights = torch.zeros(16)
    weights[3] = 2.0  # only row 3 counts, twice: 0.5 * sum_c 2 (q_c3 - y_3)^2 / 16
    weighted, _ = q_regression_loss(q, target, weights)
    torch.testing.assert_close(weighted, 0.5 * sum(2.0 * (q[c, 3] - target[3]) ** 2 / 16 for c in range(2)))
    loss.backward()
    assert q.grad is not None and target.grad is None


def test_actor_and_temperature_losses_match_sb3():
    q = torch.tensor([[1.0, 4.0], [2.0, 3.0]])  # min: [1, 3]
    log_prob = torch.tensor([-1.0, 0.5])
    assert float(sac_actor_loss(q, log_prob, 0.1)) == pytest.approx(((0.1 * -1 - 1) + (0.1 * 0.5 - 3)) / 2)
    log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
    loss = temperature_loss(log_alpha, log_prob, target_entropy=-2.0)
    # SB3: -(log_ent_coef * (log_prob + target_entropy).detach()).mean()
    assert float(loss.detach()) == pytest.approx(-math.log(0.1) * ((-1.0 - 2.0) + (0.5 - 2.0)) / 2)
    loss.backward()
    assert float(log_alpha.grad) == pytest.approx(-((-3.0) + (-1.5)) / 2)  # entropy below target: alpha grows
    assert float(deterministic_actor_loss(torch.tensor([1.0, 3.0]))) == -2.0


def test_smoothed_target_action_stays_in_the_bounds_and_clips_the_noise():
    action = torch.tensor([[0.95, -0.2]]).repeat(10_000, 1)
    low, high = torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0])
    smoothed = smoothed_target_action(action, 0.2, 0.5, low, high, torch.Generator().manual_seed(0))
    assert bool((smoothed <= 1.0).all() and (smoothed >= -1.0).all())
    noise = smoothed[:, 1] + 0.2  # the second column never reaches a bound: its noise is only clipped at 0.5
    assert float(noise.abs().max()) <= 0.5 + 1e-6 and float(noise.std()) == pytest.approx(0.2, rel=0.05)
    assert float((smoothed[:, 0] == 1.0).float().mean()) == pytest.approx(0.40, abs=0.03)  # P(eps > 0.05) = 0.40
    torch.testing.assert_close(smoothed_target_action(action[:2], 0.0, 0.5, low, high), action[:2])


def test_polyak_update_matches_sb3():
    from stable_baselines3.common.utils import polyak_update as sb3_polyak

    torch.manual_seed(0)
    source = [torch.randn(3, 4), torch.randn(5)]
    target = [torch.randn(3, 4), torch.randn(5)]
    reference = [t.clone() for t in target]
    polyak_update(target, source, 0.005)
    sb3_polyak(source, reference, 0.005)
    for mine, theirs in zip(target, reference):
        torch.testing.assert_close(mine, theirs)
    polyak_update(target, source, 1.0)
    assert all(torch.equal(t, s) for t, s in zip(target, source))
    with pytest.raises(ValueError, match="1 target tensors for 2 source tensors"):
        polyak_update(target[:1], source, 0.5)


def test_q_critic_shapes_and_independent_critics():
    critic = QCritic(obs_dim=3, action_dim=2, hidden=(16,), num_critics=2, normalize_obs=False)
    obs, action = torch.randn(5, 3), torch.randn(5, 2)
    q = critic(obs, action)
    assert q.shape == (2, 5)
    assert not torch.allclose(q[0], q[1])  # two independently initialized networks
    first = critic.nets[0]
    by_hand = first(torch.cat((obs, action), -1)).squeeze(-1)
    torch.testing.assert_close(q[0], by_hand)
    (q[0].sum()).backward()
    # critic 1 is untouched by critic 0's loss (zero or no gradient), critic 0 is not
    assert all(p.grad is None or not p.grad.any() for p in critic.nets[1].parameters())
    assert any(p.grad is not None and p.grad.any() for p in critic.nets[0].parameters())
    with pytest.raises(ValueError, match="num_critics must be >= 1"):
        QCritic(3, 2, num_critics=0)
