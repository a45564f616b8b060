"""``HistoryEnv`` (``policy.history: K``): window contents worked out by hand, final_obs, state, build_env wiring.

A fake env with obs [steps in episode, 10 * episode + row] and action bounds [0.5, 2] pins the layout (frames
oldest first, each [obs, previous applied action]; zero action clipped to 0.5 at reset); Pendulum-v1 checks the
wrapper through ``build_env`` against a raw env stepped by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robopt.build import build_env
from robopt.config import ConfigError
from robopt.envs.history import HistoryEnv, history_frames
from robopt.experiment import load_config

ROOT = Path(__file__).parents[2]


class StepEnv:
    """Fake VecEnv (D = 2, A = 1): obs = [steps in episode, 10 * episode + row]; row i ends (truncated) after
    ``lengths[i]`` steps and auto-resets; action bounds [0.5, 2]. Records the actions it receives."""

    obs_dim, action_dim, env_id, device = 2, 1, "fake/Steps", torch.device("cpu")

    def __init__(self, lengths: list[int], goal: bool = False) -> None:
        self.num_envs, self.lengths = len(lengths), torch.tensor(lengths)
        self.action_low, self.action_high = torch.tensor([0.5]), torch.tensor([2.0])
        self.count = torch.zeros(self.num_envs, dtype=torch.int64)
        self.episode = torch.zeros(self.num_envs, dtype=torch.int64)
        self.actions: list[torch.Tensor] = []
        self.dt, self.max_episode_steps = 0.02, 7
        self.state_dict = lambda: {"count": self.count.clone(), "episode": self.episode.clone()}
        self.load_state_dict = self._load
        if goal:
            self.compute_reward = lambda achieved, desired: -(achieved - desired).abs().sum(-1)

    def _load(self, state: dict) -> None:
        self.count, self.episode = state["count"].clone(), state["episode"].clone()

    def _obs(self) -> torch.Tensor:
        return torch.stack((self.count, 10 * self.episode + torch.arange(self.num_envs)), dim=1).float()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self.count.zero_()
        self.episode.zero_()
        return self._obs()

    def step(self, action: torch.Tensor):
        self.actions.append(action.clone())
        self.count = self.count + 1
        done = self.count >= self.lengths
        info = {"final_obs": self._obs(), "tag": torch.tensor(7)}
        self.count = torch.where(done, 0, self.count)
        self.episode = self.episode + done.long()
        zeros = torch.zeros(self.num_envs)
        return self._obs(), zeros, torch.zeros_like(done), done, info

    def close(self) -> None:
        pass


def test_window_over_steps_with_an_auto_reset_and_final_obs():
    env = HistoryEnv(StepEnv([2, 5]), 3)  # K = 3 frames of F = D + A = 3
    assert (env.obs_dim, env.action_dim, env.dt, env.max_episode_steps) == (9, 1, 0.02, 7)
    # reset: each row's first obs three times, each with the zero action clipped into [0.5, 2] = 0.5
    assert env.reset().tolist() == [[0, 0, 0.5] * 3, [0, 1, 0.5] * 3]
    # step 1: actions 1 and 3 applied as 1 and 2 (clamped); newest frame [obs after the step, applied action]
    window, _, _, truncated, info = env.step(torch.tensor([[1.0], [3.0]]))
    assert env.inner.actions[-1].tolist() == [[1.0], [2.0]]
    assert window.tolist() == [[0, 0, 0.5, 0, 0, 0.5, 1, 0, 1], [0, 1, 0.5, 0, 1, 0.5, 1, 1, 2]]
    assert info["final_obs"].tolist() == window.tolist() and info["tag"].item() == 7 and not truncated.any()
    # step 2: row 0 ends at obs [2, 0] (its second step) and restarts at [0, 10]; row 1 goes on with action 0.7
    window, _, _, truncated, info = env.step(torch.tensor([[-1.0], [0.7]]))
    assert truncated.tolist() == [True, False]
    assert info["final_obs"][0].tolist() == [0, 0, 0.5, 1, 0, 1, 2, 0, 0.5]  # the ended episode's last window
    assert window[0].tolist() == [0, 10, 0.5] * 3  # the new episode's first obs, zero actions clipped
    assert window[1].tolist() == pytest.approx([0, 1, 0.5, 1, 1, 2, 2, 1, 0.7])
    assert info["final_obs"][1].tolist() == window[1].tolist()
    # step 3: row 0's new episode shifts in from its fresh window
    window = env.step(torch.tensor([[1.5], [1.0]]))[0]
    assert window[0].tolist() == [0, 10, 0.5, 0, 10, 0.5, 1, 10, 1.5]


def test_state_dict_round_trip_restores_the_window():
    env = HistoryEnv(StepEnv([3, 4]), 2)
    env.reset()
    env.step(torch.tensor([[1.0], [2.0]]))
    state = env.state_dict()
    expected = [env.step(torch.tensor([[0.6], [0.9]]))[0] for _ in range(3)]
    env.step(torch.tensor([[2.0], [2.0]]))  # move away, then back
    env.load_state_dict(state)
    again = [env.step(torch.tensor([[0.6], [0.9]]))[0] for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(expected, again))  # the same computation replayed


def test_goal_tasks_and_bad_frames_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="not supported on goal tasks") as error:
        HistoryEnv(StepEnv([2], goal=True), 2)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="integer >= 1"):
        HistoryEnv(StepEnv([2]), 0)


def _config(*overrides: str, name: str = "ppo_pendulum.yaml"):
    return load_config(ROOT / "configs" / name, ["env.num_envs=2", *overrides])


def test_build_env_wraps_pendulum_and_final_obs_ends_at_the_raw_final_obs():
    config = _config("policy.history=2", "env.kwargs={max_episode_steps: 2}")
    env, raw = build_env(config), build_env(_config("env.kwargs={max_episode_steps: 2}"))
    try:
        assert isinstance(env, HistoryEnv) and history_frames(env) == (env.inner, 2)
        assert env.obs_dim == 2 * (3 + 1)  # K * (D + A): Pendulum's cos, sin, angular velocity and the torque
        low, high = env.obs_bounds()
        assert low.tolist() == [-1, -1, -8, -2] * 2 and high.tolist() == [1, 1, 8, 2] * 2
        first, raw_first = env.reset(seed=3), raw.reset(seed=3)
        assert torch.equal(first, torch.cat([raw_first, torch.zeros(2, 1)], 1).repeat(1, 2))  # 0 is inside [-2, 2]
        action = torch.tensor([[0.5], [-3.0]])  # row 1 applied as -2
        env.step(action)
        raw_obs = raw.step(action.clamp(-2, 2))[0]
        _, _, _, truncated, info = env.step(action)
        _, _, _, raw_truncated, raw_info = raw.step(action.clamp(-2, 2))
        assert truncated.all() and raw_truncated.all()  # two-step episodes: both rows ended
        applied = torch.tensor([[0.5], [-2.0]])
        expected = torch.cat([raw_obs, applied, raw_info["final_obs"], applied], 1)
        assert torch.allclose(info["final_obs"], expected)  # same Gymnasium computation: equal up to float noise
    finally:
        env.close()
        raw.close()


def test_history_is_off_on_the_robot_side_and_with_history_one():
    config = _config("policy.history=3")
    robot_env = build_env(config, policy_side=False)  # a simulated robot sends raw observations
    plain = build_env(_config())
    try:
        assert not isinstance(robot_env, HistoryEnv) and robot_env.obs_dim == 3
        assert not isinstance(plain, HistoryEnv) and history_frames(plain) == (plain, 1)
    finally:
        robot_env.close()
        plain.close()


def test_bad_history_values_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"policy: history must be an integer >= 1") as error:
        _config("policy.history=0")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"history=2 needs horizon 1") as error:
        _config("policy.history=2", "policy.horizon=2", name="dppo_pendulum.yaml")
    assert "\n" not in str(error.value)
