"""Goal-conditioned native tasks ``mujoco/GripperReach`` and ``mujoco/GripperPush``: layout, reset distribution,
sparse reward and success, actuation scale, scripted experts, checkpoint round trip and backend selection."""

from __future__ import annotations

import pytest
import torch

from robopt.envs import make_env
from robopt.envs.experts import make_expert
from robopt.envs.registry import gymnasium_twin, resolve_backend
from robopt.envs.tasks.goal import GripperPush, GripperReach, compute_reward, is_success

REACH, PUSH = "mujoco/GripperReach", "mujoco/GripperPush"


def _success_rate(env_id: str, num_envs: int, episodes_per_row: int, seed: int, policy: str = "expert") -> float:
    """Fraction of episodes whose last observation (``final_obs``) is a success."""
    env = make_env(env_id, num_envs, seed=seed)
    obs = env.reset(seed=seed)
    act = make_expert(env, seed)
    generator = torch.Generator().manual_seed(seed)
    successes = []
    for _ in range(50 * episodes_per_row):
        action = act(obs) if policy == "expert" else torch.rand(num_envs, env.action_dim, generator=generator) * 2 - 1
        obs, _, _, truncated, info = env.step(action)
        successes.append(info["is_success"][truncated])
    success = torch.cat(successes)
    assert success.numel() == num_envs * episodes_per_row
    return success.float().mean().item()


def test_auto_backend_layout_and_goal_slices() -> None:
    env = make_env(REACH, 4, seed=0)  # 4 envs on CPU: a task with a Gymnasium twin would get 'gymnasium'
    assert type(env).__name__ == "NativeVecEnv" and env.env_id == REACH
    assert resolve_backend(REACH, "auto", "cpu", 4, False) == resolve_backend(PUSH, "auto", "cpu", 1, False) == "mujoco"
    obs = env.reset(seed=0)
    assert obs.shape == (4, 9) and env.action_dim == 3 and obs.dtype == torch.float32
    assert (env.achieved_goal, env.desired_goal) == (slice(0, 3), slice(6, 9))
    # reach obs = [gripper pos, gripper vel, goal]; the gripper starts at rest at (0, 0, 0.2); qpos[3:6] is the goal
    qpos = env.physics.state()["qpos"].float()
    torch.testing.assert_close(obs[:, :6], torch.tensor([[0.0, 0.0, 0.2, 0.0, 0.0, 0.0]]).expand(4, 6))
    torch.testing.assert_close(obs[:, 6:9], qpos[:, 3:6])
    push = make_env(PUSH, 2, seed=0)
    obs = push.reset(seed=0)
    assert obs.shape == (2, 20) and push.action_dim == 2
    assert (push.achieved_goal, push.desired_goal) == (slice(3, 6), slice(17, 20))
    torch.testing.assert_close(obs[:, 6:9], obs[:, 3:6] - obs[:, 0:3])  # box - gripper
    assert not hasattr(make_env("mujoco/Reacher", 1, backend="mujoco"), "compute_reward")  # no goals, no API


def test_reset_distributions() -> None:
    reach = make_env(REACH, 200, seed=1).reset(seed=1)
    goal = reach[:, 6:9] - torch.tensor([0.0, 0.0, 0.2])  # offset from the gripper start
    half = torch.tensor([0.15, 0.15, 0.1])
    assert (goal.abs() <= half).all()
    assert (goal.abs().amax(0) > 0.9 * half).all()  # the whole box is used
    assert goal.std(0)[0] == pytest.approx(0.3 / 12**0.5, rel=0.2)  # U(-0.15, 0.15): std 0.3 / sqrt(12) = 0.0866
    push = make_env(PUSH, 200, seed=1).reset(seed=1)
    box, goal = push[:, 3:6], push[:, 17:20]
    assert (push[:, :3] == torch.tensor([0.0, 0.0, 0.025])).all()  # the finger starts at (0, 0) at box height
    assert (box[:, :2].abs() <= 0.15).all() and (box[:, :2].norm(dim=1) >= 0.05).all()
    assert (goal[:, :2].abs() <= 0.15).all() and (box[:, 2] == 0.025).all() and (goal[:, 2] == 0.025).all()
    assert ((box - goal).norm(dim=1) > 0.05).all()  # never solved at reset


@pytest.mark.parametrize("env_id", [REACH, PUSH])
def test_goal_stays_put_and_reward_matches_compute_reward(env_id) -> None:
    env = make_env(env_id, 4, seed=2)
    env.reset(seed=2)
    goal_qpos = env.physics.state()["qpos"][:, -3:].clone()
    generator = torch.Generator().manual_seed(0)
    for t in range(50):
        action = torch.rand(4, env.action_dim, generator=generator) * 2 - 1
        _, reward, terminated, truncated, info = env.step(action)
        final = info["final_obs"]
        achieved, desired = final[:, env.achieved_goal], final[:, env.desired_goal]
        expected = env.compute_reward(achieved, desired)
        assert torch.equal(reward, expected) and set(reward.tolist()) <= {-1.0, 0.0}
        assert torch.equal(info["is_success"], (achieved - desired).norm(dim=1) <= 0.05)
        assert torch.equal(info["is_success"], reward == 0.0)
        assert not terminated.any() and bool(truncated.all()) == (t == 49)  # 50-step time limit, no termination
        if t < 49:
            assert (env.physics.state()["qpos"][:, -3:] - goal_qpos).abs().max() < 1e-9  # measured: exactly 0


def test_obs_noise_reward_and_success_use_the_noise_free_state() -> None:
    """What docs/envs.md states for HER with obs_noise: the env's reward and success ignore the noise, the observed
    goals (what hindsight relabels from) carry it."""
    env = make_env(REACH, 64, seed=4, randomization={"obs_noise": 0.05})
    env.reset(seed=4)
    disagree = 0
    for _ in range(10):
        obs, reward, _, _, info = env.step(torch.zeros(64, 3))
        clean = env.task.observe(env.physics.state()).float()
        torch.testing.assert_close(reward, env.compute_reward(clean[:, 0:3], clean[:, 6:9]))
        assert torch.equal(info["is_success"], is_success(clean[:, 0:3], clean[:, 6:9]))
        assert (obs - clean).std().item() == pytest.approx(0.05, rel=0.2)  # the policy and the buffer see noise
        disagree += int((env.compute_reward(obs[:, 0:3], obs[:, 6:9]) != reward).sum())
    assert disagree > 0  # relabelling from observed goals can give another reward than the env's


def test_compute_reward_is_vectorized_and_sparse() -> None:
    achieved = torch.zeros(5, 3)
    # distances 0, 0.03, 0.05 (3-4-5 triangle: on the boundary, a success), 0.06 and 0.5
    desired = torch.tensor([[0.0, 0, 0], [0.03, 0, 0], [0, 0.03, 0.04], [0.06, 0, 0], [0.3, 0.4, 0]])
    assert compute_reward(achieved, desired).tolist() == [0.0, 0.0, 0.0, -1.0, -1.0]
    assert is_success(achieved, desired).tolist() == [True, True, True, False, False]
    env = make_env(PUSH, 2, seed=0)
    batch = env.compute_reward(achieved_goal=achieved, desired_goal=desired)  # keywords, as Hindsight calls it
    assert batch.dtype == torch.float32 and batch.shape == (5,)
    assert GripperReach.max_episode_steps == GripperPush.max_episode_steps == 50


def test_gripper_moves_five_cm_per_step_at_full_action() -> None:
    env = make_env(REACH, 1, seed=0)
    env.reset(seed=0)
    xs = [env.physics.state()["qpos"][0, 0].item()]
    for _ in range(4):
        env.step(torch.tensor([[1.0, 0.0, 0.0]]))
        xs.append(env.physics.state()["qpos"][0, 0].item())
    steps = torch.diff(torch.tensor(xs))
    # velocity servo, time constant 0.01 s in a 0.04 s step: measured 0.0378 from rest, then 0.0497, 0.0500, 0.0500
    assert 0.035 < steps[0] < 0.04 and ((steps[1:] > 0.049) & (steps[1:] < 0.0505)).all()
    assert abs(env.physics.state()["qpos"][0, 2].item() - 0.2) < 1e-6  # gravity on, gravcomp: z does not sag


def test_scripted_experts_succeed_and_random_push_fails() -> None:
    assert _success_rate(REACH, 20, 1, seed=0) >= 0.95  # measured 1.0
    assert _success_rate(PUSH, 20, 2, seed=0) >= 0.9  # measured 1.0 (800 episodes over seeds 0-2)
    assert _success_rate(PUSH, 20, 2, seed=0, policy="random") <= 0.1  # measured 0.01 over 200 episodes


def test_state_dict_round_trip_continues_identically() -> None:
    env = make_env(PUSH, 3, seed=1)
    obs = env.reset(seed=1)
    act = make_expert(env, 0)
    for _ in range(37):
        obs = env.step(act(obs))[0]
    state = env.state_dict()
    expected, current = [], obs
    for _ in range(30):  # crosses the episode end at step 50 (auto-reset draws from the saved RNG)
        out = env.step(act(current))
        expected.append(out)
        current = out[0]
    restored = make_env(PUSH, 3, seed=99)
    restored.load_state_dict(state)
    current = obs
    for t, out in enumerate(expected):
        again = restored.step(act(current))
        current = again[0]
        for index in range(4):
            assert torch.equal(out[index], again[index]), f"step {t} output {index}"
        for key in ("final_obs", "episode_return", "is_success"):
            assert torch.equal(out[4][key], again[4][key]), f"step {t} {key}"
    assert any(bool(out[3].any()) for out in expected)


def test_gymnasium_backend_refused() -> None:
    with pytest.raises(ValueError, match=r"mujoco/GripperPush has no Gymnasium twin.*allowed: auto, mujoco"):
        make_env(PUSH, 2, backend="gymnasium")
    with pytest.raises(ValueError, match="mujoco/GripperReach is a native task with no Gymnasium twin"):
        gymnasium_twin(REACH)
