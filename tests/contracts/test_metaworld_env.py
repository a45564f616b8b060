"""VecEnv contract on the Meta-World adapter (worker processes of .venv-metaworld), checked against Meta-World's own
Gymnasium env run in that venv, and its bad input.

`make test` builds .venv-metaworld first (`make metaworld`), so these run in CI; a bare `pytest` without that venv
skips them and says how to build it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robopt.envs import make_env
from robopt.envs.metaworld_env import GROUPS, TASKS, metaworld_python

try:
    PYTHON = metaworld_python()
except ValueError as error:
    PYTHON = None
    REASON = str(error)
needs_venv = pytest.mark.skipif(PYTHON is None, reason="no Meta-World venv: `make metaworld` builds it")
pytestmark = pytest.mark.xdist_group("metaworld")  # one xdist worker: the env's processes use both cores

# Meta-World's own MT1 env in its venv: the goal variation the robopt row draws (numpy's default_rng(seed)), the same
# actions, and what Meta-World returns (its Gymnasium registration, not robopt's worker code).
PEER = """
import json, sys, warnings
import numpy as np, gymnasium as gym, metaworld
warnings.filterwarnings("ignore")
task, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = gym.make("Meta-World/MT1", env_name=task, seed=0)
env.get_wrapper_attr("toggle_sample_tasks_on_reset")(False)
variations = metaworld.MT1(task, seed=0).train_tasks
env.unwrapped.set_task(variations[int(np.random.default_rng(seed).integers(len(variations)))])
env.unwrapped.seed(seed)
obs, _ = env.reset()
actions = np.random.default_rng(123).uniform(-1, 1, size=(steps, 4)).astype(np.float32)
out = {"obs": [obs.tolist()], "reward": [], "success": [], "truncated": []}
for action in actions:
    obs, reward, terminated, truncated, info = env.step(action)
    out["obs"].append(obs.tolist()); out["reward"].append(float(reward))
    out["success"].append(bool(info["success"])); out["truncated"].append(bool(truncated))
print(json.dumps(out))
"""


def test_the_task_table_is_meta_worlds_fifty_in_four_groups():
    assert len(TASKS) == 50 and [len(names) for names in GROUPS.values()] == [28, 11, 6, 5]


@needs_venv
def test_the_table_names_exactly_the_tasks_meta_world_has():
    listed = subprocess.run(
        [PYTHON, "-c", "import json, metaworld; print(json.dumps(sorted(metaworld.ALL_V3_ENVIRONMENTS)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(listed.stdout.strip().splitlines()[-1]) == sorted(TASKS)


@needs_venv
def test_rows_step_as_meta_worlds_own_env_does():
    """Two workers of two rows each (rows 0-1 and 2-3); row 3, seeded 5 + 3 = 8, against Meta-World's MT1 env on
    the goal variation default_rng(8) draws, under the same 60 random actions, dense reward."""
    steps = 60
    peer = subprocess.run([PYTHON, "-c", PEER, "push-v3", "8", str(steps)], capture_output=True, text=True, check=True)
    expected = json.loads(peer.stdout.strip().splitlines()[-1])
    env = make_env("metaworld/push-v3", 4, reward="dense", workers=2)
    try:
        obs = env.reset(seed=5)
        assert obs.shape == (4, 39) and obs.dtype == torch.float32
        # float32 here, float64 in Meta-World: 1e-6 relative is the cast; the physics is the same MuJoCo 3.3.0 build
        np.testing.assert_allclose(obs[3].numpy(), expected["obs"][0], rtol=1e-6, atol=1e-6)
        actions = np.random.default_rng(123).uniform(-1, 1, size=(steps, 4)).astype(np.float32)
        for t in range(steps):
            action = torch.zeros(4, 4)
            action[3] = torch.from_numpy(actions[t])
            obs, reward, terminated, truncated, info = env.step(action)
            np.testing.assert_allclose(obs[3].numpy(), expected["obs"][t + 1], rtol=1e-6, atol=1e-6)
            assert abs(float(reward[3]) - expected["reward"][t]) <= 1e-5 * max(1.0, abs(expected["reward"][t]))
            assert bool(info["is_success"][3]) == any(expected["success"][: t + 1])
        assert not bool((terminated | truncated).any())
        assert not torch.allclose(obs[0], obs[1])  # rows draw their own goal variations
    finally:
        env.close()


@pytest.fixture(scope="module")
def reach():
    if PYTHON is None:
        pytest.skip(REASON)
    env = make_env("metaworld/reach-v3", 3, workers=2)
    yield env
    env.close()


def test_the_expert_succeeds_and_a_success_ends_the_episode_with_reward_one(reach):
    """Sparse reward, terminate on success (the defaults): Meta-World's reach expert within its 500 steps."""
    reach.reset(seed=0)
    ended = torch.zeros(3, dtype=torch.bool)
    for _ in range(500):
        obs, reward, terminated, truncated, info = reach.step(reach.expert_action())
        assert not bool(truncated.any())
        assert torch.equal(reward[terminated], torch.ones(int(terminated.sum())))
        assert torch.equal(reward[~terminated], torch.zeros(int((~terminated).sum())))  # 1.0 at the success step only
        assert bool(info["is_success"][terminated].all())
        assert torch.equal(info["final_obs"][~terminated], obs[~terminated])
        ended |= terminated
        if bool(ended.all()):
            break
    assert bool(ended.all())


def test_the_time_limit_truncates_at_500_steps_and_auto_resets(reach):
    obs = reach.reset(seed=1)
    for step in range(1, 501):
        obs, reward, terminated, truncated, info = reach.step(torch.zeros(3, 4))  # standing still never succeeds
        assert bool(truncated.all()) == (step == 500) and not bool(terminated.any())
    assert torch.equal(info["episode_length"], torch.full((3,), 500))
    assert not bool(info["is_success"].any()) and float(info["episode_return"].abs().sum()) == 0.0
    assert not torch.allclose(info["final_obs"], obs)  # final_obs is the last state, obs the next episode's first
    reset = reach.reset(seed=1)
    assert torch.allclose(reset, reach.reset(seed=1)) and not torch.allclose(reset, reach.reset(seed=2))


def test_bad_actions_are_one_line_errors(reach):
    reach.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \[3, 4\]"):
        reach.step(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="NaN"):
        reach.step(torch.full((3, 4), float("nan")))
    with pytest.raises(TypeError, match="floating-point"):
        reach.step(np.zeros((3, 4)))


def test_an_unknown_task_lists_the_fifty_by_group():
    with pytest.raises(ValueError, match=r"unknown Meta-World task 'pick-cube-v3'.*very hard: disassemble-v3"):
        make_env("metaworld/pick-cube-v3", 1)


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="allowed backends: auto, metaworld"):
        make_env("metaworld/reach-v3", 1, backend="mujoco")
    with pytest.raises(ValueError, match="backend 'metaworld' runs Meta-World task ids"):
        make_env("Pendulum-v1", 1, backend="metaworld")
    with pytest.raises(ValueError, match="unknown Meta-World reward 'shaped'; allowed: sparse, dense"):
        make_env("metaworld/reach-v3", 1, reward="shaped")
    with pytest.raises(ValueError, match="workers must be between 1 and num_envs=2"):
        make_env("metaworld/reach-v3", 2, workers=3)


def test_without_the_venv_the_error_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROBOPT_METAWORLD_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ValueError, match="the Meta-World Python .* does not exist"):
        make_env("metaworld/reach-v3", 1)
    monkeypatch.setenv("ROBOPT_METAWORLD_PYTHON", sys.executable)  # robopt's own Python: no Meta-World in it
    with pytest.raises(ValueError, match="No module named 'metaworld'.*run `make metaworld`"):
        make_env("metaworld/reach-v3", 1)


def test_the_cli_refuses_an_unknown_task_in_one_line_with_exit_code_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "robopt", "train", "configs/dppo_metaworld.yaml", "env.id=metaworld/pick-cube-v3",
         f"log.run_root={tmp_path}"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "unknown Meta-World task 'pick-cube-v3'; the 50 tasks" in line and "Traceback" not in done.stderr
