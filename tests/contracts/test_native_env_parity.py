"""Parity of every native task (CPU ``mujoco`` backend) with its Gymnasium v5 twin.

Both envs start from the same state (the Gymnasium env's qpos/qvel are set from the robopt env's reset
state; after every episode end both are re-synced this way) and are driven with the same actions for
1000 steps. Observations, rewards and terminated/truncated must agree.

Tolerance: rtol=1e-5 as the issue asks, plus atol=1e-5. robopt returns float32, Gymnasium float64; a
float32 rounding is 6e-8 relative, far inside rtol. The atol covers values that cancel to ~0: Gymnasium
computes the control cost in float32 (``np.square`` of the float32 action) and robopt in float64, so a
reward like ``forward - ctrl`` near zero differs by up to ~1e-7 absolute, which is an unbounded relative
error. The physics itself is bit-identical (same MjModel, same calls in the same order).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from robopt.envs import make_env
from robopt.envs.tasks import TASKS

STEPS = 1000
RTOL = ATOL = 1e-5


def _sync(gym_env: gym.Env, env) -> np.ndarray:
    """Reset the Gymnasium env, then put it in the robopt env's (row 0) state; returns its observation."""
    gym_env.reset(seed=0)
    state = env.physics.state()
    unwrapped = gym_env.unwrapped
    unwrapped.set_state(state["qpos"][0].numpy().copy(), state["qvel"][0].numpy().copy())
    return unwrapped._get_obs()


@pytest.mark.parametrize("task_cls", TASKS, ids=[t.name for t in TASKS])
def test_parity_with_gymnasium_v5(task_cls) -> None:
    env = make_env(f"mujoco/{task_cls.name}", 1, backend="mujoco", seed=0)
    gym_env = gym.make(task_cls.gymnasium_id)
    rng = np.random.default_rng(0)
    low, high = env.action_low.numpy(), env.action_high.numpy()
    obs = env.reset(seed=0)
    gym_obs = _sync(gym_env, env)
    np.testing.assert_allclose(obs[0].numpy(), gym_obs, rtol=RTOL, atol=ATOL, err_msg="reset obs")
    episodes = 0
    for t in range(STEPS):
        action = rng.uniform(low, high).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(torch.from_numpy(action[None]))
        gym_obs, gym_reward, gym_terminated, gym_truncated, _ = gym_env.step(action)
        where = f"{task_cls.name} step {t} (episode {episodes})"
        assert bool(terminated[0]) == gym_terminated, where
        assert bool(truncated[0]) == gym_truncated, where
        np.testing.assert_allclose(info["final_obs"][0].numpy(), gym_obs, rtol=RTOL, atol=ATOL, err_msg=where)
        np.testing.assert_allclose(float(reward[0]), gym_reward, rtol=RTOL, atol=ATOL, err_msg=where)
        assert not bool(info["unstable"][0]), where
        if gym_terminated or gym_truncated:
            episodes += 1
            gym_obs = _sync(gym_env, env)
            np.testing.assert_allclose(obs[0].numpy(), gym_obs, rtol=RTOL, atol=ATOL, err_msg=f"{where} reset")
        else:
            np.testing.assert_allclose(obs[0].numpy(), gym_obs, rtol=RTOL, atol=ATOL, err_msg=where)
    env.close()
    gym_env.close()
