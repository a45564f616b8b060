"""``robopt/MultiGoal`` (torch backend): VecEnv contract, hand-worked dynamics and rewards, wall geometry,
auto-reset, seeding, checkpointing, the multimodal scripted expert and bad options."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from robopt.checkpoint import load_checkpoint, save_checkpoint
from robopt.core.protocols import VecEnv
from robopt.envs import BACKENDS, list_env_ids, make_env
from robopt.envs.experts import EXPERTS, make_expert
from robopt.envs.multigoal import segment_hits_disc
from robopt.envs.registry import gymnasium_twin, resolve_backend

ID = "robopt/MultiGoal"
DIAGONAL = math.sqrt(0.5)  # 0.70711: K = 4 goals sit at (+-0.70711, +-0.70711)


def _at(env, positions: list[list[float]]):
    """Put every row at a given position, mid-episode (step counter 0)."""
    state = env.state_dict()
    state["position"] = torch.tensor(positions)
    env.load_state_dict(state)


def _steer(position: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Straight toward target [N, 2] (or [2]) at full speed: larger component 1, shorter within one step."""
    velocity = (target - position) / 0.1
    return velocity / velocity.abs().amax(dim=1, keepdim=True).clamp_min(1.0)


def _walk(env, obs: torch.Tensor, direction: torch.Tensor, steps: int) -> list[tuple]:
    """``steps`` steps of the fixed action ``direction`` [2] (scaled so its larger component is 1)."""
    action = (direction / direction.abs().max()).expand(env.num_envs, 2)
    return [env.step(action) for _ in range(steps)]


def test_contract_shapes_and_dtypes() -> None:
    env = make_env(ID, 3, seed=0)
    assert isinstance(env, VecEnv) and env.env_id == ID and env.device == torch.device("cpu")
    assert (env.obs_dim, env.action_dim) == (3, 2)
    assert env.action_low.tolist() == [-1.0, -1.0] and env.action_high.tolist() == [1.0, 1.0]
    obs = env.reset(seed=0)
    assert obs.shape == (3, 3) and obs.dtype == torch.float32
    assert obs[:, :2].abs().max() <= 0.05 and (obs[:, 2] == 0).all()
    obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 2))
    assert reward.shape == (3,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == torch.bool
    assert info["final_obs"].shape == (3, 3) and info["final_obs"].dtype == torch.float32
    assert info["episode_return"].dtype == torch.float32 and info["episode_length"].dtype == torch.int64
    assert info["reached_goal"].dtype == torch.int64 and info["reached_goal"].tolist() == [-1, -1, -1]
    torch.testing.assert_close(obs[:, 2], torch.full((3,), 1 / 50))
    env.close()


def test_goal_and_wall_layout() -> None:
    env = make_env(ID, 1, num_goals=4)
    expected = [[DIAGONAL, DIAGONAL], [-DIAGONAL, DIAGONAL], [-DIAGONAL, -DIAGONAL], [DIAGONAL, -DIAGONAL]]
    torch.testing.assert_close(env.goals, torch.tensor(expected))
    # wall k halfway between goals k and k + 1: 90, 180, 270, 360 degrees at radius 0.5
    torch.testing.assert_close(env.walls, torch.tensor([[0.0, 0.5], [-0.5, 0.0], [0.0, -0.5], [0.5, 0.0]]))
    assert env.wall_radius == 0.22
    mean_direction = env.goals[0] + env.goals[1]  # the mean of two good directions points at a wall
    torch.testing.assert_close(mean_direction / mean_direction.norm(), env.walls[0] / 0.5)
    # the goal lines pass 0.5 sin(45 deg) = 0.354 from the wall centres, 0.134 clear of the wall
    assert 0.5 * math.sin(math.pi / 4) - env.wall_radius > 0.1


def test_step_dynamics_and_reward_by_hand() -> None:
    env = make_env(ID, 3, seed=0)
    _at(env, [[0.0, 0.0], [0.0, 0.0], [1.45, 0.0]])
    obs, reward, terminated, truncated, _ = env.step(torch.tensor([[1.0, 0.5], [3.0, -3.0], [1.0, 0.0]]))
    # row 0: p = 0.1 * (1, 0.5) = (0.1, 0.05); nearest goal (0.70711, 0.70711):
    #   distance sqrt(0.60711^2 + 0.65711^2) = sqrt(0.36858 + 0.43179) = 0.89463 -> reward -0.089463
    # row 1: action clipped to (1, -1) -> p = (0.1, -0.1); nearest (0.70711, -0.70711): 0.60711 * sqrt(2) = 0.85858
    # row 2: 1.45 + 0.1 = 1.55 clipped to 1.5; nearest goal: sqrt(0.79289^2 + 0.70711^2) = 1.06238
    torch.testing.assert_close(obs[:, :2], torch.tensor([[0.1, 0.05], [0.1, -0.1], [1.5, 0.0]]))
    torch.testing.assert_close(reward, torch.tensor([-0.089463, -0.085858, -0.106238]), atol=1e-5, rtol=0)
    assert not terminated.any() and not truncated.any()


def test_wall_blocks_the_move_and_costs_one() -> None:
    env = make_env(ID, 2, seed=0)
    _at(env, [[0.0, 0.2], [0.0, 0.2]])
    obs, reward, *_ = env.step(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    # row 0: (0, 0.2) -> (0, 0.3) is 0.2 from the wall at (0, 0.5) (< 0.22): stays put. Reward
    #   -1 - 0.1 * sqrt(0.70711^2 + 0.50711^2) = -1 - 0.1 * 0.87014 = -1.087014
    # row 1: (0, 0.2) -> (0.1, 0.2) is 0.3 from it: moves; -0.1 * sqrt(0.60711^2 + 0.50711^2) = -0.079104
    torch.testing.assert_close(obs[:, :2], torch.tensor([[0.0, 0.2], [0.1, 0.2]]))
    torch.testing.assert_close(reward, torch.tensor([-1.087014, -0.079104]), atol=1e-5, rtol=0)
    # the check is swept: a segment whose ends are both outside a disc but which crosses it is blocked
    start, end = torch.tensor([[-0.3, 0.5], [-0.3, 0.8]]), torch.tensor([[0.3, 0.5], [0.3, 0.8]])
    assert segment_hits_disc(start, end, env.walls, 0.22).tolist() == [True, False]


@pytest.mark.parametrize("num_goals", [2, 3, 4, 6, 8])
def test_straight_run_to_each_goal_reaches_it(num_goals: int) -> None:
    env = make_env(ID, 64, seed=num_goals, num_goals=num_goals)
    for k in range(num_goals):
        obs = env.reset()
        reached = torch.zeros(64, dtype=torch.bool)
        for _ in range(10):  # within 0.1 of a goal 1.071 away at >= 0.1 per step: at most 10 steps
            obs, reward, terminated, _, info = env.step(_steer(obs[:, :2], env.goals[k]))
            assert (reward > -0.5).all()  # never blocked: shaping alone is > -0.31
            assert (info["reached_goal"][terminated] == k).all() and (info["reached_goal"][~terminated] == -1).all()
            assert (reward[terminated] > 9.98).all()  # +10 and at most 0.1 * 0.1 of shaping
            assert ((info["final_obs"][terminated, :2] - env.goals[k]).norm(dim=1) < 0.1).all()
            reached |= terminated
        assert reached.all()


def test_expected_episode_length_on_the_diagonal() -> None:
    # K = 4: start within 0.0707 of the origin, so the goal is 0.929..1.071 away and each step covers
    # 0.1 * sqrt(2) = 0.1414; reached once within 0.1: after n > (d - 0.1) / 0.1414, i.e. 6 or 7 steps.
    env = make_env(ID, 256, seed=0)
    obs, lengths = env.reset(seed=0), torch.zeros(256, dtype=torch.int64)
    for _ in range(8):
        obs, _, terminated, _, info = env.step(_steer(obs[:, :2], env.goals[0]))
        lengths = torch.where(terminated & (lengths == 0), info["episode_length"], lengths)
    assert set(lengths.tolist()) <= {6, 7} and len(set(lengths.tolist())) == 2


@pytest.mark.parametrize("num_goals", [2, 3, 4, 6, 8])
def test_straight_run_between_two_goals_hits_the_wall(num_goals: int) -> None:
    env = make_env(ID, 32, seed=0, num_goals=num_goals)
    for k in range(num_goals):
        obs = env.reset()
        outputs = _walk(env, obs, env.walls[k], 50)  # the wall direction = mean of goals k, k + 1 (K > 2)
        rewards = torch.stack([out[1] for out in outputs])  # [T, N]
        assert not any(out[2].any() for out in outputs)  # never reaches a goal
        assert all((out[4]["reached_goal"] == -1).all() for out in outputs)
        positions = torch.stack([out[4]["final_obs"][:, :2] for out in outputs])  # [T, N, 2]
        assert ((positions - env.walls[k]).norm(dim=-1) >= env.wall_radius).all()  # never inside the wall
        assert (rewards < -1).sum(0).min() >= 40  # stuck against the wall for most of the episode


def test_auto_reset_and_final_obs_on_truncation() -> None:
    env = make_env(ID, 2, seed=0, max_steps=5)
    start = env.reset(seed=0)
    rewards = []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(2, 2))
        assert not (terminated | truncated).any() and info["episode_length"].tolist() == [0, 0]
        torch.testing.assert_close(info["final_obs"], obs)
        assert info["final_obs"] is not obs
        rewards.append(reward)
    obs, reward, terminated, truncated, info = env.step(torch.zeros(2, 2))
    rewards.append(reward)
    assert truncated.all() and not terminated.any()
    assert info["episode_length"].tolist() == [5, 5] and info["reached_goal"].tolist() == [-1, -1]
    # zero actions: final_obs is the start position at time fraction 5 / 5; the next episode starts afresh
    torch.testing.assert_close(info["final_obs"], torch.cat([start[:, :2], torch.ones(2, 1)], dim=1))
    assert (obs[:, 2] == 0).all() and obs[:, :2].abs().max() <= 0.05 and not torch.equal(obs[:, :2], start[:, :2])
    # return: 5 x -0.1 * distance of the start to its nearest goal
    expected = -0.5 * (start[:, None, :2] - env.goals[None]).norm(dim=-1).min(dim=1).values
    torch.testing.assert_close(info["episode_return"], expected)
    torch.testing.assert_close(info["episode_return"], torch.stack(rewards).sum(0))


def test_termination_resets_only_that_row_and_outputs_stay_fresh() -> None:
    env = make_env(ID, 2, seed=0)
    obs = env.reset(seed=0)
    kept, rewards = [], []
    for _ in range(10):
        action = torch.stack([_steer(obs[:1, :2], env.goals[2])[0], torch.zeros(2)])
        out = env.step(action)
        kept.append((out, [t.clone() for t in out[:4]], {k: v.clone() for k, v in out[4].items()}))
        obs, reward, terminated, truncated, info = out
        rewards.append(reward)
        if terminated[0]:
            break
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert info["reached_goal"].tolist() == [2, -1]
    assert info["episode_length"][0] == len(rewards) and info["episode_length"][1] == 0
    torch.testing.assert_close(info["episode_return"][0], torch.stack(rewards)[:, 0].sum())
    assert (info["final_obs"][0, :2] - env.goals[2]).norm() < 0.1 and info["final_obs"][0, 2] > 0
    assert obs[0, :2].abs().max() <= 0.05 and obs[0, 2] == 0 and obs[1, 2] == len(rewards) / 50
    for _ in range(5):  # later steps never write into tensors already returned
        env.step(torch.ones(2, 2))
    for (obs_t, reward_t, term_t, trunc_t, info_t), copies, info_copy in kept:
        for tensor, copy in zip((obs_t, reward_t, term_t, trunc_t), copies, strict=True):
            assert torch.equal(tensor, copy)
        assert all(torch.equal(info_t[key], info_copy[key]) for key in info_copy)


def _rollout(env, seed: int, steps: int) -> list[tuple]:
    generator = torch.Generator().manual_seed(seed)
    return [env.step(torch.rand(env.num_envs, 2, generator=generator) * 4 - 2) for _ in range(steps)]


def _assert_same(first: list[tuple], second: list[tuple]) -> None:
    for t, (a, b) in enumerate(zip(first, second, strict=True)):
        for index in range(4):
            assert torch.equal(a[index], b[index]), f"step {t} output {index}"
        for key in ("final_obs", "episode_return", "episode_length", "reached_goal"):
            assert torch.equal(a[4][key], b[4][key]), f"step {t} {key}"


def test_seeding_reproducible() -> None:
    def observations(env, seed: int) -> torch.Tensor:
        first = env.reset(seed=seed)
        return torch.stack([first, *[out[0] for out in _rollout(env, 0, 40)]])

    env = make_env(ID, 4, seed=1, max_steps=10)  # 4 episodes per row: the resets' noise is compared too
    a, b = observations(env, 1), observations(make_env(ID, 4, max_steps=10), 1)
    assert torch.equal(a, b) and torch.equal(observations(env, 1), a)
    assert not torch.equal(observations(env, 2), a)


def test_state_dict_round_trip_continues_exactly(tmp_path) -> None:
    env = make_env(ID, 8, seed=1, max_steps=7)
    env.reset(seed=1)
    _rollout(env, 5, 10)  # mid-episode, after auto-resets
    save_checkpoint(tmp_path / "env.pt", env.state_dict())
    restored = make_env(ID, 8, seed=99, max_steps=7)  # another seed: the saved state must win
    restored.load_state_dict(load_checkpoint(tmp_path / "env.pt"))
    _assert_same(_rollout(env, 6, 30), _rollout(restored, 6, 30))
    with pytest.raises(ValueError, match="saved state is for"):
        make_env(ID, 8, max_steps=8).load_state_dict(env.state_dict())


@pytest.mark.parametrize("num_goals", [4, 3])
def test_expert_covers_every_goal_and_nearly_always_succeeds(num_goals: int) -> None:
    env = make_env(ID, 400, seed=0, num_goals=num_goals)
    expert = make_expert(env, seed=0)
    obs, first_goal = env.reset(seed=0), torch.full((400,), -2)
    for _ in range(50):  # the first episode of each of 400 rows
        obs, reward, terminated, truncated, info = env.step(expert(obs))
        ended = (terminated | truncated) & (first_goal == -2)
        first_goal = torch.where(ended, info["reached_goal"], first_goal)
    assert (first_goal >= 0).float().mean() >= 0.99
    counts = torch.bincount(first_goal.clamp_min(0), minlength=num_goals)
    # uniform: 400 / K each, binomial sd sqrt(400 p (1 - p)) = 8.7 (K = 4); allow about 4 sd
    assert counts.numel() == num_goals and (counts - 400 / num_goals).abs().max() <= 40


def test_expert_registry() -> None:
    assert set(EXPERTS) <= set(list_env_ids())
    available = "mujoco/GripperPush, mujoco/GripperReach, robopt/MultiGoal"
    with pytest.raises(ValueError, match=f"no scripted expert for env 'mujoco/Hopper'; available: {available}"):
        make_expert(SimpleNamespace(env_id="mujoco/Hopper"))


def test_registry_knows_the_torch_task() -> None:
    assert "torch" in BACKENDS and ID in list_env_ids()
    assert resolve_backend(ID, "auto", "cpu", 1, False) == "torch" == resolve_backend(ID, "torch", "cpu", 1, True)
    assert type(make_env(ID, 2, backend="torch")).__name__ == "MultiGoalEnv"
    with pytest.raises(ValueError, match="allowed backends: auto, torch") as error:
        make_env(ID, 2, backend="mujoco")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="unknown torch-native task 'robopt/Nope'; allowed: robopt/MultiGoal"):
        make_env("robopt/Nope", 1)
    with pytest.raises(ValueError, match="no Gymnasium twin"):
        gymnasium_twin(ID)
    with pytest.raises(ValueError, match="not available"):
        make_env("mujoco/Hopper", 1, backend="torch")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_goals": 1}, "num_goals must be an integer >= 2, got 1"),
        ({"num_goals": 9}, r"num_goals must be an integer in \[2, 8\], got 9"),
        ({"num_goals": 2.5}, "num_goals must be an integer"),
        ({"max_steps": 0}, "max_steps must be an integer >= 1, got 0"),
        ({"max_episode_steps": 10}, "unknown option.* max_episode_steps; allowed: seed, num_goals, max_steps"),
    ],
)
def test_bad_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        make_env(ID, 2, **kwargs)
    assert "\n" not in str(error.value)


def test_bad_action() -> None:
    env = make_env(ID, 2)
    with pytest.raises(ValueError, match=r"robopt/MultiGoal: action must have shape \[2, 2\]"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.full((2, 2), float("nan")))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_cuda_like_on_cpu() -> None:
    env = make_env(ID, 4096, device="cuda", seed=0, max_steps=20)
    obs = env.reset(seed=0)
    assert obs.device.type == "cuda" and env.action_low.device.type == "cuda"
    expert = make_expert(env, seed=0)
    successes = 0
    for _ in range(40):
        obs, reward, terminated, truncated, info = env.step(expert(obs))
        assert all(t.device.type == "cuda" for t in (obs, reward, terminated, truncated, *info.values()))
        successes += int(terminated.sum())
    assert successes >= 4096  # at least one success per row over two episode lengths
    restored = make_env(ID, 4096, device="cuda", seed=5, max_steps=20)
    restored.load_state_dict(env.state_dict())
    _assert_same(_rollout(env, 1, 10), _rollout(restored, 1, 10))
