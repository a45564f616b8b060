"""Runner behaviour: reproducible seeds, exact resume, NaN stops, atomic checkpoints, CLI errors, Ctrl-C."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from robopt.algorithms.onpolicy import NonFiniteError
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint, save_checkpoint
from robopt.config import build_dataclass
from robopt.experiment import ExperimentConfig
from robopt.runner import train

ROOT = Path(__file__).parents[2]


def small_config(tmp_path, env_id="Pendulum-v1", **overrides) -> ExperimentConfig:
    data = {
        "name": "small",
        "seed": 3,
        "total_steps": 4 * 2 * 64,  # 4 iterations of T=64 x N=2
        "env": {"id": env_id, "num_envs": 2},
        "policy": {"hidden": [16]},
        "critic": {"hidden": [16]},
        "rollout": {"num_steps": 64, "normalize_reward": True},
        "algo": {"name": "ppo", "epochs": 2, "minibatch_size": 32},
        "log": {"run_root": str(tmp_path / "runs"), "checkpoint_every": 1, "progress": False},
    }
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_dataclass(ExperimentConfig, data)


def _params(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["policy"]


@pytest.mark.parametrize(
    "env",
    [
        {"id": "Pendulum-v1"},
        # native backend: simulator state, randomized parameters and reset RNG travel in the checkpoint
        {"id": "mujoco/Hopper", "backend": "mujoco", "kwargs": {"randomization": {"body_mass": [0.8, 1.2]}}},
    ],
    ids=["gymnasium", "native"],
)
def test_same_seed_same_result_and_resume_is_exact(tmp_path, env):
    config = small_config(tmp_path, env={**env, "num_envs": 2})
    full = train(config)
    again = train(config)
    for key, value in _params(full.run_dir).items():
        assert torch.equal(value, _params(again.run_dir)[key]), key
    partial = train(config, stop_at_iteration=2)
    assert partial.iterations == 2
    resumed = train(config, resume_dir=partial.run_dir)
    assert resumed.iterations == 4 and resumed.env_steps == full.env_steps
    for key, value in _params(full.run_dir).items():
        assert torch.equal(value, _params(resumed.run_dir)[key]), key
    checkpoint = load_checkpoint(resumed.run_dir / LAST_CHECKPOINT)
    assert checkpoint["config"]["algo"]["name"] == "ppo"
    assert (resumed.run_dir / "config.yaml").is_file() and list(resumed.run_dir.glob("events.out.tfevents*"))


def _progress_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "progress.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_crash_then_resume_reads_like_one_uninterrupted_run(tmp_path, monkeypatch):
    # 5 iterations, checkpoints after 2 and 4. The first process dies while writing its second checkpoint, so
    # rows 3 and 4 are on disk past the checkpoint of iteration 2; the resumed run must drop them.
    config = small_config(
        tmp_path, total_steps=5 * 128, log={"checkpoint_every": 2}, rollout={"normalize_reward": False}
    )
    uninterrupted = _progress_rows(train(config).run_dir)
    import robopt.runner

    calls = []

    def dying_save(path, state):
        calls.append(state["loop"]["iteration"])
        if len(calls) == 2:
            raise OSError("simulated crash while checkpointing")
        save_checkpoint(path, state)

    monkeypatch.setattr(robopt.runner, "save_checkpoint", dying_save)
    with pytest.raises(OSError, match="simulated crash"):
        train(config)
    monkeypatch.setattr(robopt.runner, "save_checkpoint", save_checkpoint)
    run_dir = max((tmp_path / "runs" / "small").iterdir())
    before = _progress_rows(run_dir)
    assert [row["env_steps"] for row in before] == ["128", "256", "384", "512"]
    checkpoint_wall_time = float(before[1]["wall_time"])
    train(config, resume_dir=run_dir)
    rows = _progress_rows(run_dir)
    steps = [int(row["env_steps"]) for row in rows]
    assert steps == [128, 256, 384, 512, 640] == [int(row["env_steps"]) for row in uninterrupted]
    assert [row["episode_return"] for row in rows] == [row["episode_return"] for row in uninterrupted]  # exact resume
    wall = [float(row["wall_time"]) for row in rows]
    assert wall == sorted(wall) and wall[2] > checkpoint_wall_time  # the clock continues from the checkpoint
    assert "eval_return" not in rows[-1] or rows[-1]["eval_return"] == ""  # evaluation is not a second row


class _NaNAfter(gym.Env):
    """Observations turn NaN after ``after`` steps (counted over the env's lifetime)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def __init__(self, after: int = 200):
        self.after, self.count = after, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.count += 1
        obs = np.full(2, np.nan if self.count > self.after else 0.1, dtype=np.float32)
        return obs, 1.0, False, self.count % 50 == 0, {}


gym.register("robopt-test/NaNAfter-v0", entry_point=_NaNAfter)


def test_nan_observation_stops_with_iteration_and_keeps_last_checkpoint(tmp_path):
    config = small_config(tmp_path, env_id="robopt-test/NaNAfter-v0")
    with pytest.raises(NonFiniteError, match=r"iteration 4: non-finite observation from env robopt-test/NaNAfter-v0"):
        train(config)
    (run_dir,) = (tmp_path / "runs" / "small").iterdir()
    checkpoint = load_checkpoint(run_dir / LAST_CHECKPOINT)
    assert checkpoint["loop"]["iteration"] == 3  # 200 steps = iterations 1-3 fine (64 per env each), 4th poisoned
    assert not list((run_dir / "checkpoints").glob(".*tmp*"))


def _robopt(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "robopt.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, **kwargs
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "configs/missing.yaml"], "config file 'configs/missing.yaml' not found"),
        (["train", "configs/ppo_pendulum.yaml", "algo.clipp=0.1"], "unknown config key 'algo.clipp'"),
        (["train", "configs/ppo_pendulum.yaml", "algo.epochs=two"], "algo.epochs: expected an integer, got 'two'"),
        (["train", "configs/ppo_pendulum.yaml", "env.id=NoSuchEnv-v9"], "unknown Gymnasium env id 'NoSuchEnv-v9'"),
        (["train", "configs/ppo_pendulum.yaml", "env.backend=tpu"], "env.backend: 'tpu' is not allowed"),
        (["eval", "/nonexistent/run"], "is not a run directory"),
    ],
)
def test_cli_bad_input_one_line_exit_2(args, message):
    result = _robopt(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_ctrl_c_saves_checkpoint_then_resume_and_eval(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "robopt.cli", "train", "configs/ppo_pendulum.yaml", "--no-progress",
               f"log.run_root={tmp_path}", "total_steps=10000000", "log.checkpoint_every=1000"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob("*/*/progress.csv")):
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    (run_dir,) = tmp_path.glob("ppo_pendulum/*")
    assert (run_dir / LAST_CHECKPOINT).is_file()
    assert "resume with: robopt train --resume" in stdout
    iteration = load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["iteration"]
    assert iteration >= 1
    stop = f"total_steps={(iteration + 1) * 1024}"
    resumed = _robopt("train", "--resume", str(run_dir), stop, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["iteration"] == iteration + 1
    evaluated = _robopt("eval", str(run_dir), "--episodes", "2")
    assert evaluated.returncode == 0 and "over 2 episodes" in evaluated.stdout
    plotted = _robopt("plot", str(run_dir), "--out", str(tmp_path / "curves.png"))
    assert plotted.returncode == 0 and (tmp_path / "curves.png").stat().st_size > 1000


def test_fast_config_trains_checkpoints_and_resumes_through_the_cli(tmp_path):
    # make train's default config: native backend, 64 envs x 32 steps = 2048 steps per iteration.
    common = ["--no-progress", "log.eval_episodes=2"]
    first = _robopt(
        "train", "configs/ppo_halfcheetah_fast.yaml", f"log.run_root={tmp_path}", "total_steps=4096", *common
    )
    assert first.returncode == 0, first.stderr
    assert "torch threads: 1 (auto" in first.stdout and "MujocoBackend" in first.stdout
    assert "settotalmass" not in first.stdout + first.stderr
    (run_dir,) = tmp_path.glob("ppo_halfcheetah_fast/*")
    checkpoint = load_checkpoint(run_dir / LAST_CHECKPOINT)
    assert checkpoint["loop"]["iteration"] == 2 and "physics" in checkpoint["loop"]["env"]  # native env state saved
    resumed = _robopt("train", "--resume", str(run_dir), "total_steps=6144", *common)
    assert resumed.returncode == 0, resumed.stderr
    assert [int(row["env_steps"]) for row in _progress_rows(run_dir)] == [2048, 4096, 6144]
