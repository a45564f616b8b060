"""robopt sweep and tune end to end on an embedded Ray: trials as ordinary runs, failures recorded, resumes.

Each command runs as the user runs it (``python -m robopt ...``) with its Ray session files in a private temp dir.
The runs are tiny Pendulum PPO runs (a few seconds each).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from robopt.sweeps.sweep import Sweep, Trial

ROOT = Path(__file__).parents[2]
TINY = ["configs/ppo_pendulum.yaml", "total_steps=2048", "log.eval_episodes=2"]

pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time on 2 cores (the fleet's tests share the group)


@pytest.fixture
def ray_env():
    directory = tempfile.mkdtemp(prefix="robopt-ray-sweep-")  # short: Ray's socket paths stay under 108 bytes
    yield {**os.environ, "ROBOPT_RAY_TMPDIR": directory, "PYTHONUNBUFFERED": "1"}
    shutil.rmtree(directory, ignore_errors=True)


def _robopt(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    # a hang guard, not a timing: the sweep takes about 110 s alone on 2 cores, and overran 240 s beside other work
    return subprocess.run(
        [sys.executable, "-m", "robopt", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout
    )


def _sweep_dir(root: Path) -> Path:
    (path,) = root.glob("*/*")
    return path


def test_a_sweep_runs_every_point_and_seed_and_records_crashes_and_nan_runs_without_stopping(tmp_path, ray_env):
    root = tmp_path / "sweeps"
    result = _robopt(
        "sweep",
        *TINY,
        "--seeds",
        "0-1",
        "--grid",
        "env.kwargs={},{no_such_option: 1},{g: .nan}",
        "--root",
        str(root),
        env=ray_env,
    )
    assert result.returncode == 0, result.stderr
    sweep = Sweep(_sweep_dir(root))
    statuses = {trial.id: sweep.status(trial) for trial in sweep.trials()}
    assert [statuses[f"p00-s{seed}"]["status"] for seed in (0, 1)] == ["finished", "finished"]
    for seed in (0, 1):  # the bad option fails at run time (the env refuses it): recorded with its one line
        failed = statuses[f"p01-s{seed}"]
        assert failed["status"] == "failed" and failed["exit_code"] == 2
        assert failed["error"].startswith("robopt: error: env.id='Pendulum-v1'") and "no_such_option" in failed["error"]
    for seed in (0, 1):  # gravity NaN: the run stops on a non-finite observation (exit 3), pruned
        assert (
            statuses[f"p02-s{seed}"]["status"] == "pruned"
            and "non-finite observation" in statuses[f"p02-s{seed}"]["error"]
        )
    first = Path(statuses["p00-s0"]["run_dir"])
    assert (first / "eval.json").is_file() and first.parent.parent == sweep.run_root(Trial(0, 0))
    assert statuses["p00-s0"]["eval_return"] != statuses["p00-s1"]["eval_return"]  # two seeds, two runs
    text = _robopt("report", str(sweep.path), env=ray_env)
    assert text.returncode == 0 and "(2 failed)" in text.stdout and "(2 pruned)" in text.stdout, text.stderr


def test_bad_grid_values_and_addresses_are_refused_before_any_trial(tmp_path, ray_env):
    root = tmp_path / "sweeps"
    bad = _robopt("sweep", *TINY, "--grid", "algo.epochs=3,three", "--root", str(root), env=ray_env)
    assert bad.returncode == 2 and "grid point algo.epochs=three: algo.epochs: expected an integer" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not root.exists()
    unreachable = _robopt("sweep", *TINY, "--seeds", "0", "--address", "127.0.0.1:1", "--root", str(root), env=ray_env)
    assert unreachable.returncode == 2 and "--address='127.0.0.1:1' is unreachable" in unreachable.stderr
    space = tmp_path / "space.yaml"
    space.write_text("algo.no_such_key: {uniform: [0.1, 0.2]}\n")
    unknown = _robopt("tune", *TINY, "--space", str(space), "--root", str(root), env=ray_env)
    assert unknown.returncode == 2 and "--space: algo.no_such_key=0.1: unknown config key" in unknown.stderr


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc)."""
    found, frontier = set(), [pid]
    while frontier:
        path = Path(f"/proc/{frontier.pop()}/task")
        for task in path.glob("*/children") if path.exists() else []:
            for child in task.read_text().split():
                if int(child) not in found:
                    found.add(int(child))
                    frontier.append(int(child))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_sweep_killed_with_sigkill_resumes_keeping_what_finished(tmp_path, ray_env):
    root = tmp_path / "sweeps"
    command = [sys.executable, "-m", "robopt", "sweep", "configs/ppo_pendulum.yaml", "total_steps=20480",
               "log.eval_episodes=2", "log.checkpoint_every=1", "--seeds", "0-2", "--root", str(root)]  # fmt: skip
    driver = subprocess.Popen(command, cwd=ROOT, env=ray_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(root.glob("*/*/runs/*/*/*/checkpoints/last.pt")):
            time.sleep(0.2)
        descendants = _children(driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        driver.kill()
    deadline = time.time() + 30  # Ray's processes share the driver's fate, and the runs their Ray worker's
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in descendants):
        time.sleep(0.5)
    survivors = [
        pid
        for pid in descendants
        if Path(f"/proc/{pid}/cmdline").exists() and b"robopt" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert not survivors, "runs outlived the killed sweep"
    sweep = Sweep(_sweep_dir(root))
    before = {trial.id: sweep.status(trial) for trial in sweep.trials()}
    unfinished = [trial for trial in sweep.trials() if before[trial.id] is None]
    assert unfinished, "every trial finished before the kill: nothing left to resume"
    resumed = _robopt("sweep", "--resume", str(sweep.path), env=ray_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{3 - len(unfinished)} trials already done, {len(unfinished)} to run" in resumed.stdout
    for trial in sweep.trials():
        status = sweep.status(trial)
        assert status["status"] == "finished"
        if before[trial.id] is not None:
            assert status == before[trial.id]  # never redone
    logs = [(sweep.path / "trials" / f"{trial.id}.log").read_text() for trial in unfinished]
    assert any("robopt: resuming" in log for log in logs)  # a run with a checkpoint continued from it


def test_tune_runs_trials_and_resumes_without_redoing_one(tmp_path, ray_env):
    root = tmp_path / "tune"
    space = tmp_path / "space.yaml"
    space.write_text("algo.learning_rate: {log_uniform: [1e-4, 1e-2]}\nalgo.epochs: {int: [2, 4]}\n")
    first = _robopt(
        "tune",
        *TINY,
        "--space",
        str(space),
        "--trials",
        "2",
        "--seeds-per-trial",
        "2",
        "--root",
        str(root),
        env=ray_env,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("optuna trial") == 2 and "best: trial" in first.stdout
    path = _sweep_dir(root)
    statuses = {p.name: json.loads(p.read_text()) for p in (path / "trials").glob("*.json")}
    assert sorted(statuses) == ["p00-s0.json", "p00-s1.json", "p01-s0.json", "p01-s1.json"]
    again = _robopt("tune", "--resume", str(path), "--trials", "3", env=ray_env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("optuna trial") == 1  # only the third
    for name, status in statuses.items():
        assert json.loads((path / "trials" / name).read_text()) == status
    import optuna

    study = optuna.load_study(study_name="robopt", storage=f"sqlite:///{path / 'study.db'}")
    assert len(study.trials) == 3 and all(t.state.name == "COMPLETE" for t in study.trials)
    assert "probability that A beats B" in _robopt("report", str(path), env=ray_env).stdout


def test_a_peer_library_runs_as_a_trial_beside_robopt_and_the_report_compares_them(tmp_path, ray_env):
    root = tmp_path / "sweeps"
    result = _robopt("sweep", *TINY, "--seeds", "0", "--peer", "sb3-ppo", "--root", str(root), env=ray_env)
    assert result.returncode == 0, result.stderr
    sweep = Sweep(_sweep_dir(root))
    assert sweep.points == [{}, {"peer": "sb3-ppo"}]
    peer = sweep.status(Trial(1, 0))
    assert peer["status"] == "finished" and "eval_return" in peer
    run_dir = Path(peer["run_dir"])
    assert (run_dir / "progress.csv").read_text().startswith("env_steps,episode_return,episode_length,wall_time")
    assert "Stable-Baselines3 defaults" in (run_dir / "config.yaml").read_text()
    text = _robopt("report", str(sweep.path), env=ray_env).stdout
    assert "P(default > peer=sb3-ppo)" in text
    refused = _robopt("sweep", *TINY, "--peer", "sb3-a2c", "--root", str(root), env=ray_env)
    assert refused.returncode == 2 and "--peer 'sb3-a2c': allowed: sb3-ppo, sb3-sac" in refused.stderr
