"""``ActionChunkEnv``: H inner steps per step, rewards summed up to a row's end, neutral actions after it.

A fake counter env with dynamics worked out by hand pins the semantics; a native Hopper checks the wrapper
against stepping an identically seeded env H times by hand.
"""

from __future__ import annotations

import math

import pytest
import torch

from robopt.core.protocols import VecEnv
from robopt.envs import make_env
from robopt.envs.chunking import ActionChunkEnv, neutral_action
from robopt.envs.episode_stats import EpisodeTracker
from robopt.envs.native_env import check_action


class CounterEnv:
    """Fake VecEnv: obs = [steps in episode, episodes finished], reward = sum of the action, row i ends after
    ``lengths[i]`` steps (terminated if ``terminates[i]`` else truncated; with ``alternate``, the other one in odd
    episodes) and auto-resets. Records its actions.

    Bounds [-1, 3] x (-inf, inf): the neutral action is [1, 0]. ``info["is_success"]`` = terminated,
    ``info["final_privileged_obs"]`` = [episode index of final_obs], ``info["calls"]`` a scalar step count.
    """

    obs_dim, action_dim, env_id, device = 2, 2, "fake/Counter", torch.device("cpu")

    def __init__(self, lengths: list[int], terminates: list[bool], extras: bool = True, alternate: bool = False):
        self.num_envs, self.alternate = len(lengths), alternate
        self.lengths, self.terminates = torch.tensor(lengths), torch.tensor(terminates)
        self.action_low, self.action_high = torch.tensor([-1.0, -math.inf]), torch.tensor([3.0, math.inf])
        self.count = torch.zeros(self.num_envs, dtype=torch.int64)
        self.episode = torch.zeros(self.num_envs, dtype=torch.int64)
        self.tracker = EpisodeTracker(self.num_envs, self.device)
        self.actions: list[torch.Tensor] = []
        if extras:  # instance attributes, as NativeVecEnv sets its optional ones
            self.dt, self.max_episode_steps, self.privileged_dim = 0.01, 5, 1
            self.privileged_obs = lambda: self.episode[:, None].float()
            self.state_dict = lambda: {"count": self.count.clone(), "episode": self.episode.clone()}
            self.load_state_dict = self._load
            self.compute_reward = lambda achieved, desired: -(achieved - desired).norm(dim=-1)
            self.achieved_goal, self.desired_goal = slice(0, 1), slice(1, 2)

    def _load(self, state: dict) -> None:
        self.count, self.episode = state["count"].clone(), state["episode"].clone()

    def _obs(self) -> torch.Tensor:
        return torch.stack((self.count, self.episode), dim=1).float()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self.count.zero_()
        self.episode.zero_()
        self.tracker.reset()
        return self._obs()

    def step(self, action: torch.Tensor):
        check_action(self.env_id, action, self.num_envs, self.action_dim)
        self.actions.append(action.clone())
        reward = action.sum(dim=1).float()
        self.count = self.count + 1
        done = self.count >= self.lengths
        kind = self.terminates ^ (self.alternate & (self.episode % 2 == 1))
        terminated, truncated = done & kind, done & ~kind
        info = {"final_obs": self._obs(), "is_success": terminated.clone()}
        info["final_privileged_obs"] = self.episode[:, None].float()
        info["episode_return"], info["episode_length"] = self.tracker.update(reward, done)
        info["calls"] = torch.tensor(len(self.actions))
        self.count = torch.where(done, 0, self.count)
        self.episode = self.episode + done.long()
        return self._obs(), reward, terminated, truncated, info

    def close(self) -> None:
        pass


def _chunk(rows: list[list[tuple[float, float]]]) -> torch.Tensor:
    """[N, H * A] from per-row lists of H sub-step actions (row-major: sub-step h is columns 2h, 2h + 1)."""
    return torch.tensor([[x for pair in row for x in pair] for row in rows], dtype=torch.float32)


def _three_rows() -> tuple[CounterEnv, ActionChunkEnv]:
    # row 0 terminates after 2 steps, row 1 truncates after 5, row 2 terminates after every step
    inner = CounterEnv([2, 5, 1], [True, False, True])
    env = ActionChunkEnv(inner, 3)
    env.reset(seed=0)
    return inner, env


CHUNK_1 = _chunk([[(1, 0.5), (2, 0.25), (-1, 4)], [(1, 1), (1, 1), (1, 1)], [(3, 0), (2, 2), (2, 2)]])
CHUNK_2 = _chunk([[(0.5, 0.5), (0.5, 0.5), (0.5, 0.5)], [(0.5, 0.5), (0.5, 0.5), (2, 2)], [(-1, 0), (2, 2), (2, 2)]])


def test_reward_is_summed_only_up_to_the_end() -> None:
    _, env = _three_rows()
    _, reward, _, _, _ = env.step(CHUNK_1)
    # row 0: 1.5 + 2.25, ends at sub-step 1 (the neutral step's 1.0 is not added); row 1: 2 + 2 + 2 (no end);
    # row 2: 3, ends at sub-step 0 (two more 1-step episodes follow, ignored)
    assert reward.tolist() == [3.75, 6.0, 3.0]
    _, reward, _, _, _ = env.step(CHUNK_2)
    # row 0 (count 1 after its reset step): 1.0, ends at sub-step 0; row 1 (count 3): 1 + 1, truncated at
    # sub-step 1; row 2: -1
    assert reward.tolist() == [1.0, 2.0, -1.0]


def test_terminated_and_truncated_of_the_first_end_stay_apart() -> None:
    _, env = _three_rows()
    _, _, terminated, truncated, _ = env.step(CHUNK_1)
    assert terminated.tolist() == [True, False, True] and truncated.tolist() == [False, False, False]
    assert terminated.dtype == truncated.dtype == torch.bool
    _, _, terminated, truncated, _ = env.step(CHUNK_2)
    assert terminated.tolist() == [True, False, True] and truncated.tolist() == [False, True, False]


def test_a_second_end_in_the_same_chunk_changes_nothing() -> None:
    # rows 0 and 2: 1-step episodes, row 0 truncated / terminated / truncated, row 2 the other way round;
    # row 1 terminates at its 3rd step
    inner = CounterEnv([1, 3, 1], [False, True, True], alternate=True)
    env = ActionChunkEnv(inner, 3)
    env.reset()
    chunk = _chunk([[(2, 0), (2, 0), (2, 0)], [(1, 0), (1, 0), (1, 0)], [(2, 0), (2, 0), (2, 0)]])
    obs, reward, terminated, truncated, info = env.step(chunk)
    assert reward.tolist() == [2.0, 3.0, 2.0]  # rows 0 and 2: sub-step 0 only
    assert terminated.tolist() == [False, True, True] and truncated.tolist() == [True, False, False]  # first ends
    assert info["is_success"].tolist() == [False, True, True]  # row 0's second end (terminated) would say True
    assert info["final_obs"].tolist() == [[1, 0], [3, 0], [1, 0]] and obs.tolist() == [[0, 3], [0, 1], [0, 3]]
    assert info["episode_return"].tolist() == [2.0, 3.0, 2.0] and info["episode_length"].tolist() == [1, 3, 1]
    assert torch.stack(inner.actions)[:, 0].tolist() == [[2, 0], [1, 0], [1, 0]]  # neutral after the first end


def test_final_obs_and_episode_stats_of_an_end_mid_chunk() -> None:
    _, env = _three_rows()
    obs, _, _, _, info = env.step(CHUNK_1)
    # row 0 ended at count 2 of episode 0, then one reset step: obs [1, 1]; row 1 runs on: final_obs = obs;
    # row 2 ended at count 1 of episode 0, then two more 1-step episodes: obs [0, 3]
    assert obs.tolist() == [[1, 1], [3, 0], [0, 3]]
    assert info["final_obs"].tolist() == [[2, 0], [3, 0], [1, 0]]
    assert info["episode_return"].tolist() == [3.75, 0.0, 3.0] and info["episode_length"].tolist() == [2, 0, 1]
    # from the end sub-step for ended rows (the last sub-step would say False / episodes 1 and 2), else the last
    assert info["is_success"].tolist() == [True, False, True]
    assert info["final_privileged_obs"].tolist() == [[0], [0], [0]]
    assert info["calls"].item() == 3  # not per-row: the last sub-step's
    obs, _, _, _, info = env.step(CHUNK_2)
    assert obs.tolist() == [[0, 3], [1, 1], [0, 6]]
    assert info["final_obs"].tolist() == [[2, 1], [5, 0], [1, 3]]
    # row 0's second episode: the reset step of chunk 1 (1.0) and sub-step 0 (1.0), counted by the inner env
    assert info["episode_return"].tolist() == [2.0, 8.0, -1.0] and info["episode_length"].tolist() == [2, 5, 1]
    assert info["is_success"].tolist() == [True, False, True]
    assert info["final_privileged_obs"].tolist() == [[1], [0], [3]]


def test_rows_that_ended_receive_the_neutral_action() -> None:
    inner, env = _three_rows()
    assert neutral_action(inner.action_low, inner.action_high).tolist() == [1.0, 0.0]  # midpoint; 0 if infinite
    env.step(CHUNK_1)
    received = torch.stack(inner.actions).tolist()  # [H, N, A]
    assert received == [
        [[1, 0.5], [1, 1], [3, 0]],
        [[2, 0.25], [1, 1], [1, 0]],  # row 2 ended at sub-step 0
        [[1, 0], [1, 1], [1, 0]],  # row 0 ended at sub-step 1
    ]


def test_neutral_action_for_half_open_bounds() -> None:
    low, high = torch.tensor([-2.0, 1.0, -math.inf, -math.inf]), torch.tensor([4.0, math.inf, -3.0, math.inf])
    assert neutral_action(low, high).tolist() == [1.0, 1.0, -3.0, 0.0]  # 0 clipped into the bounds


def test_horizon_one_steps_like_the_inner_env() -> None:
    plain, inner = CounterEnv([2, 5, 1], [True, False, True]), CounterEnv([2, 5, 1], [True, False, True])
    env = ActionChunkEnv(inner, 1)
    assert env.action_dim == 2 and torch.equal(env.action_low, plain.action_low)
    generator = torch.Generator().manual_seed(0)
    torch.testing.assert_close(env.reset(seed=0), plain.reset(seed=0), rtol=0, atol=0)
    for _ in range(7):
        action = torch.randn(3, 2, generator=generator)
        ours, theirs = env.step(action), plain.step(action)
        for a, b in zip(ours[:4], theirs[:4], strict=True):
            assert torch.equal(a, b) and a.dtype == b.dtype
        assert ours[4].keys() == theirs[4].keys()
        for key in ours[4]:
            assert torch.equal(ours[4][key], theirs[4][key]), key
    assert torch.equal(torch.stack(inner.actions), torch.stack(plain.actions))


def test_shapes_bounds_and_pass_through_attributes() -> None:
    inner, env = _three_rows()
    assert isinstance(env, VecEnv) and env.inner is inner and env.horizon == 3
    assert (env.num_envs, env.obs_dim, env.action_dim, env.env_id) == (3, 2, 6, "fake/Counter")
    assert env.device == inner.device
    inf = math.inf
    assert env.action_low.tolist() == [-1, -inf, -1, -inf, -1, -inf]
    assert env.action_high.tolist() == [3, inf, 3, inf, 3, inf]
    assert env.dt == pytest.approx(0.03) and env.max_episode_steps == 2  # ceil(5 / 3)
    assert env.privileged_dim == 1
    env.step(CHUNK_1)
    assert env.privileged_obs().tolist() == [[1], [0], [3]]  # the inner env's current values
    for name in ("compute_reward", "achieved_goal", "desired_goal"):  # chunked goal tasks are not supported
        assert hasattr(inner, name) and not hasattr(env, name)
    bare = ActionChunkEnv(CounterEnv([2], [True], extras=False), 2)
    for name in ("dt", "max_episode_steps", "privileged_obs", "privileged_dim", "state_dict", "load_state_dict"):
        assert not hasattr(bare, name), name


def test_state_dict_passes_through() -> None:
    _, env = _three_rows()
    env.step(CHUNK_1)
    state = env.state_dict()
    expected = env.step(CHUNK_2)
    restored = ActionChunkEnv(CounterEnv([2, 5, 1], [True, False, True]), 3)
    restored.reset()
    restored.load_state_dict(state)
    got = restored.step(CHUNK_2)
    for a, b in zip(got[:4], expected[:4], strict=True):
        assert torch.equal(a, b)
    assert torch.equal(got[4]["final_obs"], expected[4]["final_obs"])


def test_returned_tensors_are_fresh() -> None:
    _, env = _three_rows()
    first = env.step(CHUNK_1)
    kept = [t.clone() for t in first[:4]] + [{k: v.clone() for k, v in first[4].items()}]
    assert first[4]["final_obs"] is not first[0]
    env.step(CHUNK_2)
    env.step(CHUNK_1)
    for a, b in zip(first[:4], kept[:4], strict=True):
        assert torch.equal(a, b)
    for key, value in first[4].items():
        assert torch.equal(value, kept[4][key]), key


def test_bad_horizon_and_bad_action_shape_are_one_line_errors() -> None:
    inner = CounterEnv([2], [True])
    for horizon in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=r"^fake/Counter: action horizon must be an integer >= 1, got") as error:
            ActionChunkEnv(inner, horizon)
        assert "\n" not in str(error.value)
    env = ActionChunkEnv(inner, 3)
    with pytest.raises(ValueError, match=r"action horizon 3: action must have shape \[1, 6\], got \[1, 2\]$"):
        env.step(torch.zeros(1, 2))
    assert inner.actions == []  # refused before any sub-step


def test_native_hopper_matches_stepping_the_inner_env_by_hand() -> None:
    horizon = 4
    randomization = {"body_mass": [0.7, 1.3]}  # privileged obs [N, 4]: each row's mass scales, redrawn at resets
    env = ActionChunkEnv(make_env("mujoco/Hopper", 3, backend="mujoco", seed=0, randomization=randomization), horizon)
    reference = make_env("mujoco/Hopper", 3, backend="mujoco", seed=0, randomization=randomization)
    assert env.action_dim == horizon * 3 and env.dt == pytest.approx(4 * reference.dt)
    assert env.max_episode_steps == 250  # ceil(1000 / 4)
    obs, reference_obs = env.reset(seed=0), reference.reset(seed=0)
    assert torch.equal(obs, reference_obs)
    neutral = 0.5 * (reference.action_low + reference.action_high)  # Hopper's bounds are [-1, 1]: 0
    generator = torch.Generator().manual_seed(1)
    ends_mid_chunk = 0
    for _ in range(40):
        uniform = torch.rand(3, env.action_dim, generator=generator)
        action = env.action_low + (env.action_high - env.action_low) * uniform
        assert torch.equal(env.privileged_obs(), reference.privileged_obs())
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 11) and reward.shape == terminated.shape == truncated.shape == (3,)
        assert info["final_obs"].shape == (3, 11) and info["final_privileged_obs"].shape == (3, 4)
        ended = torch.zeros(3, dtype=torch.bool)
        expected_reward = torch.zeros(3)
        expected_final, expected_terminated = torch.zeros(3, 11), torch.zeros(3, dtype=torch.bool)
        expected_privileged = torch.zeros(3, 4)
        expected_return = torch.zeros(3)
        for h in range(horizon):
            sub_action = torch.where(ended[:, None], neutral, action[:, 3 * h : 3 * h + 3])
            sub_obs, sub_reward, sub_terminated, sub_truncated, sub_info = reference.step(sub_action)
            first = (sub_terminated | sub_truncated) & ~ended
            ends_mid_chunk += int((first & torch.tensor(h < horizon - 1)).sum())
            expected_reward += torch.where(ended, 0.0, sub_reward)
            expected_final[first] = sub_info["final_obs"][first]
            expected_privileged[first] = sub_info["final_privileged_obs"][first]
            expected_terminated |= sub_terminated & first
            expected_return[first] = sub_info["episode_return"][first]
            ended |= first
        assert torch.equal(obs, sub_obs) and torch.equal(reward, expected_reward)
        assert torch.equal(terminated, expected_terminated) and not truncated.any()
        assert torch.equal(info["final_obs"][ended], expected_final[ended])
        assert torch.equal(info["final_obs"][~ended], obs[~ended])
        assert torch.equal(info["final_privileged_obs"][ended], expected_privileged[ended])
        assert torch.equal(info["final_privileged_obs"][~ended], sub_info["final_privileged_obs"][~ended])
        assert torch.equal(info["episode_return"], expected_return)
        assert torch.equal(info["unstable"], torch.zeros(3, dtype=torch.bool))
    assert ends_mid_chunk > 0, "random actions must topple the Hopper mid-chunk within 160 steps"
    env.close()
    reference.close()
