"""``env.observe`` (``ObservationSelectEnv``): partially observed variants against the full env, bad indices.

Pendulum-v1's observation is (cos theta, sin theta, theta dot) with declared bounds [-1, -1, -8] .. [1, 1, 8].
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robopt.build import build_env
from robopt.config import ConfigError
from robopt.envs.history import HistoryEnv
from robopt.envs.observe import ObservationSelectEnv, declared_obs_bounds
from robopt.experiment import load_config

ROOT = Path(__file__).parents[2]


def _config(*overrides: str):
    return load_config(ROOT / "configs" / "ppo_pendulum.yaml", ["env.num_envs=2", *overrides])


@pytest.mark.parametrize("indices", [[0, 1], [2, 0]])
def test_selection_follows_the_full_env_including_final_obs(indices):
    steps = "env.kwargs={max_episode_steps: 2}"
    env, full = build_env(_config(f"env.observe={indices}", steps)), build_env(_config(steps))
    try:
        assert isinstance(env, ObservationSelectEnv) and env.obs_dim == len(indices)
        assert torch.equal(env.reset(seed=1), full.reset(seed=1)[:, indices])
        for action in ([[1.0], [-1.0]], [[0.3], [2.0]]):  # the second step ends both two-step episodes
            obs, _, _, truncated, info = env.step(torch.tensor(action))
            full_obs, _, _, full_truncated, full_info = full.step(torch.tensor(action))
            assert torch.equal(obs, full_obs[:, indices]) and torch.equal(truncated, full_truncated)
            assert torch.equal(info["final_obs"], full_info["final_obs"][:, indices])
        assert truncated.all()
        low, high = declared_obs_bounds(env)  # what the export writes as obs_low / obs_high
        assert low.tolist() == [[-1, -1, -8][i] for i in indices] and high.tolist() == [[1, 1, 8][i] for i in indices]
    finally:
        env.close()
        full.close()


def test_selection_is_applied_on_the_robot_side_and_under_a_history():
    config = _config("env.observe=[0, 1]", "policy.history=2")
    robot_env, policy_env = build_env(config, policy_side=False), build_env(config)
    try:
        assert isinstance(robot_env, ObservationSelectEnv) and robot_env.obs_dim == 2  # the robot's sensors
        assert isinstance(policy_env, HistoryEnv) and policy_env.obs_dim == 2 * (2 + 1)
        assert declared_obs_bounds(policy_env)[0].tolist() == [-1, -1, -2] * 2  # frame: cos, sin bounds, torque
    finally:
        robot_env.close()
        policy_env.close()


@pytest.mark.parametrize(("observe", "problem"), [("[0, 3]", "index 3 is out of range"), ("[1, 1]", "indices repeat")])
def test_bad_indices_are_one_line_errors_naming_obs_dim(observe, problem):
    with pytest.raises(ConfigError, match=f"{problem}; Pendulum-v1 has obs_dim 3") as error:
        build_env(_config(f"env.observe={observe}"))
    assert "from 0 to 2" in str(error.value) and "\n" not in str(error.value)
