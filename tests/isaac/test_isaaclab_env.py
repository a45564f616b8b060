"""The ``isaaclab`` backend on Isaac Lab's cart-pole (``Isaac-Cartpole-Direct``), on CPU, in the Isaac venv.

Skipped where Isaac Lab is not installed (the main venv): ``make test-isaac`` runs these in ``.venv-isaac``.
Isaac Lab keeps one simulation per process, so this module builds one env (8 envs, 0.5 s episodes = 30 steps)
and the training, export and evaluation run as ``robopt`` subprocesses.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("isaaclab")
pytest.importorskip("isaaclab_tasks")

from robopt.envs import make_env  # noqa: E402
from robopt.envs.isaaclab_env import IsaacLabVecEnv  # noqa: E402

ROOT = Path(__file__).parents[2]
TASK = "Isaac-Cartpole-Direct"
N, STEPS = 8, 30  # 0.5 s episodes at 60 Hz


@pytest.fixture(scope="module")
def env():
    env = make_env(TASK, N, backend="isaaclab", episode_length_s=0.5, seed=0)
    yield env
    env.close()


def test_shapes_dtypes_bounds_and_local_assets(env):
    assert isinstance(env, IsaacLabVecEnv)
    assert (env.num_envs, env.obs_dim, env.action_dim, env.privileged_dim) == (N, 4, 1, 0)
    assert env.max_episode_steps == STEPS and env.dt == pytest.approx(1 / 60)
    assert env.action_low.tolist() == [-1.0] and env.action_high.tolist() == [1.0]  # unbounded space, clipped
    assert [line.split(":")[0] for line in env.replaced_assets] == ["ground", "cartpole"]
    assert all("isaac_usd" in line for line in env.replaced_assets)
    obs = env.reset(seed=3)
    assert obs.shape == (N, 4) and obs.dtype == torch.float32 and obs.device == env.device
    assert obs[:, 0].abs().max() <= 1.0 + 1e-6  # cart position drawn in [-1, 1]
    next_obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 1))
    assert next_obs.shape == (N, 4) and reward.shape == (N,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert {"final_obs", "episode_return", "episode_length"} <= set(info)
    assert info["final_obs"].shape == (N, 4) and info["episode_length"].dtype == torch.int64


def test_returned_tensors_are_not_modified_by_later_steps(env):
    env.reset(seed=4)
    first = env.step(torch.zeros(N, 1))
    kept = [t.clone() for t in first[:4]]
    env.step(torch.full((N, 1), 0.5))
    for before, after in zip(kept, first[:4]):
        assert torch.equal(before, after)


def test_truncation_at_the_time_limit_with_final_obs_and_auto_reset(env):
    obs = env.reset(seed=5)
    total = torch.zeros(N)
    history = [obs]
    for t in range(STEPS):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 1))
        total += reward
        history.append(obs)
        done = terminated | truncated
        if t < STEPS - 1:
            assert not truncated.any()
    # with no force, no cart leaves the +-3 m track in 0.5 s: every row times out, none terminates
    assert truncated.all() and not terminated.any()
    assert torch.equal(info["episode_length"], torch.full((N,), STEPS))
    torch.testing.assert_close(info["episode_return"], total, rtol=1e-5, atol=1e-6)
    # final_obs is the state the episode ended in (continuing the trajectory), the returned obs a fresh reset
    final = info["final_obs"]
    step_before = history[-2]
    assert not torch.allclose(final, obs)
    assert (final[:, 0] - step_before[:, 0]).abs().max() < 0.2  # one 1/60 s step from the previous position
    assert obs[:, 0].abs().max() <= 1.0 + 1e-6 and obs[:, 2].abs().max() <= 0.5 + 1e-6  # reset ranges
    assert done.all()
    assert "Metrics/success_rate" in info["log"] and float(info["log"]["Metrics/success_rate"]) == 1.0


def test_termination_when_the_cart_leaves_the_track(env):
    env.reset(seed=6)
    pushed = torch.ones(N, 1)  # 100 N to the right, every step
    for _ in range(STEPS):
        obs, reward, terminated, truncated, info = env.step(pushed)
        if terminated.any():
            break
    assert terminated.any() and not (terminated & truncated).any()
    rows = terminated.nonzero().flatten()
    assert (info["final_obs"][rows, 0] > 3.0).all()  # ended beyond the 3 m bound
    assert (obs[rows, 0].abs() <= 1.0 + 1e-6).all()  # and restarted
    assert (info["episode_length"][rows] < STEPS).all() and (reward[rows] < 0).all()  # the termination penalty
    assert float(info["log"]["Metrics/success_rate"]) == 0.0


def test_bad_actions_and_missing_groups_are_one_line_errors(env):
    with pytest.raises(ValueError, match=r"action must be \[8, 1\]"):
        env.step(torch.zeros(N, 2))
    with pytest.raises(ValueError, match="needs a 'policy' observation group"):
        env._check_groups({"actor": torch.zeros(N, 4)})


@pytest.mark.parametrize(
    "env_id, kwargs, message",
    [
        ("Isaac-No-Such-Task", {}, "unknown Isaac Lab task 'Isaac-No-Such-Task'"),
        (TASK, {"physics": "physx"}, "robopt runs Isaac Lab on newton_mjwarp only"),
        (TASK, {"clip_actions": -1.0}, "clip_actions must be a positive number"),
    ],
)
def test_bad_construction_is_a_one_line_error(env_id, kwargs, message):
    with pytest.raises(ValueError, match=message):
        IsaacLabVecEnv(env_id, 2, **kwargs)


def test_an_asset_that_cannot_be_made_locally_names_assets_dir(tmp_path):
    from robopt.envs.isaac_assets import local_usd

    remote = "https://example.invalid/Isaac/Robots/Unitree/Go2/go2.usd"
    with pytest.raises(ValueError, match="put go2.usd .* env.kwargs.assets_dir"):
        local_usd(remote, "")
    (tmp_path / "go2.usd").write_text("#usda 1.0\n")
    assert local_usd(remote, str(tmp_path)) == tmp_path / "go2.usd"
    with pytest.raises(ValueError, match="is not a folder"):
        local_usd(remote, str(tmp_path / "missing"))


def _robopt(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "robopt", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ppo_moves_the_return_then_exports_with_parity(tmp_path):
    done = _robopt(
        "train",
        "configs/ppo_isaac_cartpole.yaml",
        "total_steps=40960",
        "env.num_envs=32",
        f"log.run_root={tmp_path}",
        "log.checkpoint_every=5",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = next(tmp_path.glob("ppo_isaac_cartpole/*"))
    with open(run_dir / "progress.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["episode_return"]]
    returns = [float(row["episode_return"]) for row in rows]
    assert len(returns) >= 10
    assert sum(returns[-5:]) / 5 > sum(returns[:5]) / 5 + 0.5, returns
    assert "env/Metrics/success_rate" in rows[-1]
    exported = _robopt("export", str(run_dir), "--format", "onnx")
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert (run_dir / "export" / "policy.onnx").exists()
    match = re.search(r"max \|onnx - torch\| ([0-9.e+-]+) on (\d+) observations", exported.stdout)
    assert match, exported.stdout
    assert float(match.group(1)) < 1e-5 and int(match.group(2)) > 0


def test_a_second_simulation_in_one_process_is_refused(env):
    with pytest.raises(ValueError, match="Isaac Lab runs one simulation per process"):
        IsaacLabVecEnv(TASK, 2)


MANAGER_BASED = """
import torch
from robopt.envs import make_env
env = make_env("Isaac-Cartpole", 4, seed=0)
assert type(env.unwrapped).__name__ == "ManagerBasedRLEnv" and (env.obs_dim, env.action_dim) == (4, 1)
env.reset(seed=0)
for _ in range(60):
    obs, reward, terminated, truncated, info = env.step(torch.ones(4, 1))
    if terminated.any():
        break
rows = terminated.nonzero().flatten()
assert len(rows) > 0 and (info["final_obs"][rows, 0] > 3.0).all() and (obs[rows, 0].abs() <= 1.0 + 1e-6).all()
assert float(info["log"]["Episode_Termination/cart_out_of_bounds"]) > 0
print("manager-based ok", sorted(info["log"]))
"""


def test_a_manager_based_task_through_the_same_adapter():
    done = subprocess.run([sys.executable, "-c", MANAGER_BASED], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "manager-based ok" in done.stdout


LOCOMOTION = """
import torch
from robopt.envs import make_env
env = make_env("Isaac-Ant-Direct", 4, seed=0)
assert (env.obs_dim, env.action_dim, env.max_episode_steps) == (60, 8, 960), (env.obs_dim, env.action_dim)
assert [line.split(":")[0] for line in env.replaced_assets] == ["terrain", "robot"], env.replaced_assets
env.reset(seed=0)
lowest = 1.0
for t in range(120):
    obs, reward, terminated, truncated, info = env.step(torch.rand(4, 8) * 2 - 1)
    height = env.unwrapped.robot.data.root_pos_w.torch[:, 2]
    lowest = min(lowest, float(height.min()))
    assert obs.shape == (4, 60) and torch.isfinite(obs).all() and not truncated.any()
assert lowest > 0.1, lowest  # the torso (radius 0.25) rests on the local ground plane, never falls through it
print("locomotion ok", lowest)
"""


def test_a_locomotion_task_on_local_assets_stands_on_the_local_ground():
    # Isaac-Ant-Direct: the robot from robopt's MJCF (ant_instanceable.xml), the flat terrain from a converted plane
    done = subprocess.run([sys.executable, "-c", LOCOMOTION], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "locomotion ok" in done.stdout


def test_an_asset_isaac_lab_cannot_load_is_one_line_exit_2(tmp_path):
    (tmp_path / "cartpole.usda").write_text("this is not USD\n")
    done = _robopt(
        "train",
        "configs/ppo_isaac_cartpole.yaml",
        f"env.kwargs.assets_dir={tmp_path}",
        f"log.run_root={tmp_path}",
        "--no-progress",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("robopt: error:") and "Isaac Lab could not build the env" in last, last
    assert "cartpole.usda" in last and "Traceback" not in done.stderr
