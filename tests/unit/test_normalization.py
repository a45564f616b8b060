from __future__ import annotations

import numpy as np
import torch

from robopt.core.normalization import RewardScaler, RunningNormalizer
from robopt.core.schedules import make_schedule


def test_running_normalizer_matches_numpy_over_batches():
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=generator) * 3 + 1 for n in (5, 17, 1, 40)]
    normalizer = RunningNormalizer(3)
    for batch in batches:
        normalizer.update(batch)
    data = torch.cat(batches).double().numpy()
    np.testing.assert_allclose(normalizer.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(normalizer.var.numpy(), data.var(0), rtol=1e-10)
    assert float(normalizer.count) == len(data)
    out = normalizer(torch.tensor(data[:2], dtype=torch.float32))
    expected = (data[:2] - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)


def test_running_normalizer_clips_and_state_dict_roundtrip():
    normalizer = RunningNormalizer(1, clip=5.0)
    normalizer.update(torch.tensor([[0.0], [2.0]]))  # mean 1, var 1
    assert float(normalizer(torch.tensor([[100.0]]))) == 5.0
    restored = RunningNormalizer(1, clip=5.0)
    restored.load_state_dict(normalizer.state_dict())
    assert float(restored.mean) == 1.0 and float(restored.var) == 1.0


def test_reward_scaler_resets_discounted_return_on_done():
    scaler = RewardScaler(num_envs=1, gamma=0.5)
    scaler(torch.tensor([2.0]), torch.tensor([False]))  # G = 2
    scaler(torch.tensor([2.0]), torch.tensor([True]))  # G = 0.5 * 2 + 2 = 3, then reset to 0
    assert float(scaler.discounted_return[0]) == 0.0
    # returns seen: [2, 3] -> var = 0.25, std = 0.5; a reward of 1 scales to 1 / 0.5 = 2
    scaler_stats_std = float(torch.sqrt(scaler.stats.var[0]))
    assert abs(scaler_stats_std - 0.5) < 1e-12


def test_schedules():
    linear = make_schedule("linear", 1.0)
    assert linear(0.0) == 1.0 and linear(0.25) == 0.75 and linear(1.0) == 0.0
    cosine = make_schedule("cosine", 2.0, final_fraction=0.5)
    assert cosine(0.0) == 2.0 and abs(cosine(1.0) - 1.0) < 1e-12 and abs(cosine(0.5) - 1.5) < 1e-12
    assert make_schedule("constant", 3.0)(0.7) == 3.0


def _per_step_reference(rewards, dones, gamma, clip=10.0, eps=1e-8):
    """The textbook per-step scaler (SB3 VecNormalize): update the return stats, divide by their std."""
    returns, seen, out = np.zeros(rewards.shape[1]), [], []
    for reward, done in zip(rewards, dones):
        returns = gamma * returns + reward
        seen.extend(returns.tolist())
        out.append(np.clip(reward / np.sqrt(np.var(seen) + eps), -clip, clip))
        returns = returns * ~done
    return np.stack(out)


def test_reward_scaler_over_a_rollout_equals_the_per_step_scaler():
    # Two rollouts of T=50, N=3 with random episode ends: the rollout-at-once scaler must give what a per-step
    # scaler gives (stats carried across rollouts, returns reset at each end).
    generator = np.random.default_rng(0)
    rewards = generator.normal(2.0, 3.0, size=(100, 3))
    dones = generator.random((100, 3)) < 0.05
    expected = _per_step_reference(rewards, dones, gamma=0.9)
    scaler = RewardScaler(num_envs=3, gamma=0.9)
    got = [scaler(torch.tensor(rewards[s]), torch.tensor(dones[s])) for s in (slice(0, 50), slice(50, 100))]
    np.testing.assert_allclose(torch.cat(got).numpy(), expected, rtol=1e-10)
    one_step = RewardScaler(num_envs=3, gamma=0.9)
    steps = [one_step(torch.tensor(rewards[t]), torch.tensor(dones[t])) for t in range(100)]  # [N] API
    np.testing.assert_allclose(torch.stack(steps).numpy(), expected, rtol=1e-10)


def test_an_empty_batch_leaves_the_statistics_alone():
    from robopt.core.normalization import RunningNormalizer

    normalizer = RunningNormalizer(3)
    normalizer.update(torch.ones(4, 3))
    before = normalizer.state_dict()
    normalizer.update(torch.zeros(0, 3))  # e.g. a DAPO rollout whose groups were all dropped
    assert all(torch.equal(before[key], value) for key, value in normalizer.state_dict().items())
