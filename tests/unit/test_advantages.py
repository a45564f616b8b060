from __future__ import annotations

import numpy as np
import torch

from robopt.core.advantages import bootstrap_value, gae, normalize_advantage


def test_gae_hand_worked_with_truncation_and_termination():
    # gamma = lambda = 0.5, T = 3, N = 2.
    # env 0: r = [1, 2, 3], V = [0.5, 1, 1.5], truncated at t=1 with V(final_obs) = 4, V(s_3) = 2.
    #   next V = [1, 4, 2]; delta = [1 + .5*1 - .5, 2 + .5*4 - 1, 3 + .5*2 - 1.5] = [1, 3, 2.5]
    #   A2 = 2.5; A1 = 3 + 0.25 * 0 * A2 = 3 (episode cut); A0 = 1 + 0.25 * 3 = 1.75
    # env 1: r = [1, 1, 1], V = [1, 1, 1], terminated at t=0, V(s_3) = 10.
    #   next V = [0, 1, 10]; delta = [0, 0.5, 5]; A2 = 5; A1 = 0.5 + 0.25 * 5 = 1.75; A0 = 0 (cut)
    reward = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    value = torch.tensor([[0.5, 1.0], [1.0, 1.0], [1.5, 1.0]])
    terminated = torch.tensor([[False, True], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [True, False], [False, False]])
    final_value = torch.tensor([[0.0, 99.0], [4.0, 0.0], [0.0, 0.0]])  # 99: read only if truncated
    last_value = torch.tensor([2.0, 10.0])
    next_value = bootstrap_value(value, last_value, final_value, terminated, truncated)
    torch.testing.assert_close(next_value, torch.tensor([[1.0, 0.0], [4.0, 1.0], [2.0, 10.0]]))
    advantage, return_target = gae(reward, value, next_value, terminated, truncated, gamma=0.5, gae_lambda=0.5)
    torch.testing.assert_close(advantage, torch.tensor([[1.75, 0.0], [3.0, 1.75], [2.5, 5.0]]))
    torch.testing.assert_close(return_target, advantage + value)


def test_gae_matches_stable_baselines3_on_random_rollout():
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    generator = torch.Generator().manual_seed(3)
    T, N, gamma, gae_lambda = 64, 4, 0.97, 0.9
    reward = torch.randn(T, N, generator=generator)
    value = torch.randn(T, N, generator=generator)
    final_value = torch.randn(T, N, generator=generator)
    last_value = torch.randn(N, generator=generator)
    u = torch.rand(T, N, generator=generator)
    terminated, truncated = u < 0.05, (u >= 0.05) & (u < 0.1)
    next_value = bootstrap_value(value, last_value, final_value, terminated, truncated)
    advantage, return_target = gae(reward, value, next_value, terminated, truncated, gamma, gae_lambda)

    # SB3 bootstraps truncation by adding gamma * V(final_obs) to the reward and then treating it as done;
    # episode_starts[t] marks that step t begins a new episode (the previous step ended).
    done = (terminated | truncated).numpy()
    sb3_reward = (reward + gamma * final_value * truncated).numpy()
    buffer = RolloutBuffer(T, spaces.Box(-1, 1, (1,)), spaces.Box(-1, 1, (1,)), "cpu", gae_lambda, gamma, N)
    for t in range(T):
        start = np.zeros(N, dtype=bool) if t == 0 else done[t - 1]
        buffer.add(np.zeros((N, 1)), np.zeros((N, 1)), sb3_reward[t], start, value[t], torch.zeros(N))
    buffer.compute_returns_and_advantage(last_values=last_value, dones=done[-1])
    np.testing.assert_allclose(advantage.numpy(), buffer.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(return_target.numpy(), buffer.returns, rtol=1e-5, atol=1e-5)


def test_normalize_advantage_zero_mean_unit_std():
    advantage = torch.tensor([1.0, 2.0, 3.0, 4.0])
    normalized = normalize_advantage(advantage)
    assert abs(float(normalized.mean())) < 1e-6
    assert abs(float(normalized.std()) - 1.0) < 1e-6
