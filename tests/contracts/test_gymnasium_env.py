"""VecEnv contract on the Gymnasium adapter: dtypes, devices, auto-reset, final_obs, stats, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from robopt.envs import make_env


@pytest.fixture
def env():
    env = make_env("Pendulum-v1", num_envs=3)
    yield env
    env.close()


def test_shapes_dtypes_device(env):
    obs = env.reset(seed=0)
    assert obs.shape == (3, 3) and obs.dtype == torch.float32 and obs.device == env.device
    assert env.obs_dim == 3 and env.action_dim == 1
    obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 1))
    assert reward.shape == (3,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert info["final_obs"].shape == (3, 3)
    assert info["episode_return"].shape == (3,) and info["episode_length"].dtype == torch.int64


def test_matches_gymnasium_and_auto_resets_with_final_obs(env):
    obs = env.reset(seed=7)
    reference = gym.make("Pendulum-v1")
    ref_obs, _ = reference.reset(seed=7)
    np.testing.assert_allclose(obs[0].numpy(), ref_obs, rtol=1e-6)
    actions = torch.linspace(-2, 2, 200)
    total = 0.0
    for t in range(200):
        obs, reward, terminated, truncated, info = env.step(actions[t].repeat(3, 1))
        ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(np.array([actions[t].item()]))
        total += ref_reward
        assert abs(float(reward[0]) - ref_reward) < 1e-4
        assert bool(terminated[0]) == ref_terminated and bool(truncated[0]) == ref_truncated
        if t < 199:
            np.testing.assert_allclose(obs[0].numpy(), ref_obs, rtol=1e-5, atol=1e-6)
    # Pendulum truncates at 200 steps: final_obs holds the last observation, obs the reset one.
    assert bool(truncated.all()) and not bool(terminated.any())
    np.testing.assert_allclose(info["final_obs"][0].numpy(), ref_obs, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(obs[0], info["final_obs"][0])
    assert torch.all(info["episode_length"] == 200)
    assert abs(float(info["episode_return"][0]) - total) < 1e-2


def test_seeding_is_reproducible():
    first, second = make_env("HalfCheetah-v5", 2), make_env("HalfCheetah-v5", 2)
    torch.testing.assert_close(first.reset(seed=3), second.reset(seed=3))
    action = torch.full((2, 6), 0.3)
    torch.testing.assert_close(first.step(action)[0], second.step(action)[0])
    assert not torch.allclose(first.reset(seed=3)[0], first.reset(seed=3)[1])  # rows get distinct seeds


def test_state_dict_restores_mid_episode():
    env = make_env("Hopper-v5", 2)
    env.reset(seed=1)
    for _ in range(5):
        env.step(torch.full((2, 3), 0.5))
    state = env.state_dict()
    expected = [env.step(torch.full((2, 3), -0.2))[0] for _ in range(30)]
    clone = make_env("Hopper-v5", 2)
    clone.reset(seed=99)
    clone.load_state_dict(state)
    for obs in expected:
        torch.testing.assert_close(clone.step(torch.full((2, 3), -0.2))[0], obs)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (torch.zeros(2, 1), r"action must have shape \[3, 1\], got \[2, 1\]"),
        (torch.zeros(3, 1, dtype=torch.int64), "floating-point"),
        (torch.full((3, 1), float("nan")), "NaN or Inf"),
        (np.zeros((3, 1)), "torch.Tensor"),
    ],
)
def test_bad_actions_raise_clear_errors(env, action, message):
    env.reset(seed=0)
    with pytest.raises((ValueError, TypeError), match=message) as error:
        env.step(action)
    assert "Pendulum-v1" in str(error.value)


def test_unknown_ids_and_backends():
    with pytest.raises(ValueError, match="unknown Gymnasium env id 'Nope-v0'"):
        make_env("Nope-v0", 1)
    allowed = "auto, gymnasium, isaaclab, metaworld, mujoco, mujoco_warp"
    with pytest.raises(ValueError, match=f"unknown env backend 'cuda'; allowed: {allowed}"):
        make_env("Pendulum-v1", 1, backend="cuda")
    with pytest.raises(ValueError, match="unknown native task 'mujoco/Nope'"):
        make_env("mujoco/Nope", 1)
