"""Demonstrations as Minari datasets: exact round trip, overwrite rules, recording, compatibility, errors, CLI."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from robopt.cli import app
from robopt.config import ConfigError
from robopt.data import (
    Episode,
    check_compatible,
    load_demonstrations,
    normalize_dataset_id,
    read_episodes,
    record_episodes,
    write_dataset,
)
from robopt.data.demonstrations import datasets_root
from robopt.envs import make_env
from robopt.experiment import load_config

pytest.importorskip("minari")
ROOT = Path(__file__).parents[2]
FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


def _episode(rng: np.random.Generator, steps: int, obs_dim: int, action_dim: int, end: str) -> Episode:
    terminations = np.zeros(steps, dtype=bool)
    truncations = np.zeros(steps, dtype=bool)
    (terminations if end == "terminated" else truncations)[-1] = True
    return Episode(
        observations=rng.normal(size=(steps + 1, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(steps, action_dim)).astype(np.float32),
        rewards=rng.normal(size=steps).astype(np.float32),
        terminations=terminations,
        truncations=truncations,
    )


def _write(root: Path, name: str = "tests/toy", episodes=None, env_id: str = "robopt/MultiGoal", **kwargs) -> Path:
    episodes = episodes or _toy_episodes()
    obs_dim, action_dim = episodes[0].observations.shape[1], episodes[0].actions.shape[1]
    return write_dataset(name, episodes, env_id, obs_dim, action_dim, -1.0, 1.0, root=root, **kwargs)


def _toy_episodes(seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    return [_episode(rng, 3, 4, 2, "terminated"), _episode(rng, 5, 4, 2, "truncated"), _episode(rng, 1, 4, 2, "x")]


def test_round_trip_is_exact_and_keeps_terminations_apart(tmp_path, monkeypatch):
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    episodes = _toy_episodes()
    episodes[0].rewards[:] = [1.0, 2.0, 0.5]  # return 3.5
    path = _write(tmp_path, episodes=episodes, metadata={"source": "test", "algorithm_name": "hand"})
    assert path == tmp_path / "tests" / "toy-v0" and "MINARI_DATASETS_PATH" not in os.environ

    back, info = read_episodes("tests/toy", root=tmp_path)
    assert len(back) == 3 and info.env_id == "robopt/MultiGoal" and info.dataset_id == "tests/toy-v0"
    for written, read in zip(episodes, back):
        for name in FIELDS:
            a, b = getattr(written, name), getattr(read, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name

    demos = load_demonstrations(path)  # a plain directory works too
    assert demos.num_transitions == 3 + 5 + 1 and demos.num_episodes == 3
    assert demos.episode_index.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2] and demos.episode_index.dtype == torch.int64
    assert demos.obs.dtype == demos.action.dtype == demos.reward.dtype == torch.float32
    assert torch.equal(demos.obs[3:8], torch.from_numpy(episodes[1].observations[:-1]))
    assert torch.equal(demos.next_obs[7], torch.from_numpy(episodes[1].observations[-1]))  # final obs, not a reset
    assert demos.terminated.tolist() == [False, False, True] + [False] * 6
    assert demos.truncated.tolist() == [False] * 7 + [True, True]
    assert demos.episode_returns[0] == 3.5 and demos.metadata == {"source": "test", "algorithm_name": "hand"}
    raw = json.loads((path / "data" / "metadata.json").read_text())
    assert raw["robopt_env_id"] == "robopt/MultiGoal" and raw["algorithm_name"] == "hand"

    import minari  # Minari itself finds and reads it under the same root

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    assert list(minari.list_local_datasets()) == ["tests/toy-v0"]
    assert minari.load_dataset("tests/toy-v0").total_steps == 9


def test_names_and_root(tmp_path, monkeypatch):
    assert normalize_dataset_id("halfcheetah/medium") == "halfcheetah/medium-v0"
    assert normalize_dataset_id("pend/expert-v3") == "pend/expert-v3"
    for bad in ["", "a b", "../x", "x/", "/abs/name", "a/b-v0"]:  # "a/": Minari namespaces have 2+ characters
        with pytest.raises(ConfigError, match="bad dataset name"):
            normalize_dataset_id(bad)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    assert datasets_root() == tmp_path / "home" / ".minari" / "datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "env"))
    assert datasets_root() == tmp_path / "env" and datasets_root(tmp_path / "x") == tmp_path / "x"
    _write(None, "env/toy")
    assert (tmp_path / "env" / "env" / "toy-v0" / "data" / "main_data.hdf5").is_file()
    assert os.environ["MINARI_DATASETS_PATH"] == str(tmp_path / "env")


def test_refuses_to_overwrite_unless_forced(tmp_path):
    path = _write(tmp_path, episodes=_toy_episodes(0))
    with pytest.raises(ConfigError, match="already exists; use --force") as error:
        _write(tmp_path, episodes=_toy_episodes(1))
    assert str(path) in str(error.value)
    assert np.array_equal(read_episodes(path)[0][0].actions, _toy_episodes(0)[0].actions)  # untouched
    _write(tmp_path, episodes=_toy_episodes(1), force=True)
    assert np.array_equal(read_episodes(path)[0][0].actions, _toy_episodes(1)[0].actions)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tests"]  # no staging directory left behind
    (tmp_path / "tests" / "other-v0").mkdir()  # not a dataset: never replaced
    with pytest.raises(ConfigError, match="not a Minari dataset"):
        _write(tmp_path, "tests/other", force=True)


def test_nothing_is_written_on_bad_input(tmp_path):
    episodes = _toy_episodes()
    short = Episode(episodes[0].observations[:-1], *(getattr(episodes[0], f) for f in FIELDS[1:]))  # no final obs
    with pytest.raises(ConfigError, match="episode 1: expected"):
        _write(tmp_path, episodes=[episodes[0], short])
    with pytest.raises(ConfigError, match="JSON"):
        _write(tmp_path, metadata={"bad": object()})
    with pytest.raises(ConfigError, match="action_low must have 2 entries"):
        write_dataset("tests/toy", episodes, "x", 4, 2, [-1.0, -1.0, -1.0], 1.0, root=tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_missing_and_corrupted_datasets_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="'tests/none-v0' not found: no Minari dataset at") as error:
        load_demonstrations("tests/none", root=tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_demonstrations(tmp_path / "nowhere")
    path = _write(tmp_path)
    (path / "data" / "main_data.hdf5").write_bytes(b"not an hdf5 file")
    with pytest.raises(ConfigError, match="could not be read as a Minari dataset") as error:
        load_demonstrations("tests/toy", root=tmp_path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)
    (path / "data" / "metadata.json").unlink()
    with pytest.raises(ConfigError, match="is neither a Minari dataset .* nor a LeRobot dataset"):
        load_demonstrations(path)


def test_check_compatible(tmp_path):
    rng = np.random.default_rng(0)
    hopper = [_episode(rng, 2, 11, 3, "terminated")]
    demos = load_demonstrations(_write(tmp_path, "tests/hopper", hopper, env_id="mujoco/Hopper"))
    check_compatible(demos, "mujoco/Hopper", 11, 3)
    check_compatible(demos, "Hopper-v5", 11, 3)  # the native task's Gymnasium twin is the same task
    sizes = "observation size 11 and action size 3, but env 'mujoco/Walker2d' has observation size 17 and action size 6"
    with pytest.raises(ConfigError, match=sizes):
        check_compatible(demos, "mujoco/Walker2d", 17, 6)
    with pytest.raises(ConfigError, match="recorded on env 'mujoco/Hopper', not 'robopt/Other'"):
        check_compatible(demos, "robopt/Other", 11, 3)


def _pendulum_reward(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Gymnasium Pendulum-v1: r = -(angle^2 + 0.1 thetadot^2 + 0.001 u^2) of the state before the step."""
    angle = np.arctan2(obs[:, 1], obs[:, 0])  # already in [-pi, pi]
    return -(angle**2 + 0.1 * obs[:, 2] ** 2 + 0.001 * action[:, 0] ** 2)


def test_record_episodes_on_pendulum():
    env = make_env("Pendulum-v1", 3, backend="gymnasium")
    try:
        episodes = record_episodes(env, lambda obs: -3.0 * obs[:, 2:3], 4, progress=False)  # clipped to [-2, 2]
    finally:
        env.close()
    assert len(episodes) == 4  # rows 0-2 end together at step 200; of the next three only row 0 is kept
    for episode in episodes:
        assert episode.observations.shape == (201, 3) and episode.actions.shape == (200, 1)
        assert not episode.terminations.any() and episode.truncations.tolist() == [False] * 199 + [True]
        expected = np.clip(-3.0 * episode.observations[:-1, 2:3], -2.0, 2.0)
        np.testing.assert_allclose(episode.actions, expected, rtol=1e-6)
        np.testing.assert_allclose(
            episode.rewards, _pendulum_reward(episode.observations[:-1], episode.actions), rtol=1e-4, atol=1e-4
        )
        # The final observation follows from the last state and action (g = 10, l = m = 1, dt = 0.05): it is the
        # true last observation, not the next episode's reset.
        theta, thetadot = math.atan2(*episode.observations[-2, 1::-1]), episode.observations[-2, 2]
        new_thetadot = np.clip(thetadot + (15.0 * np.sin(theta) + 3.0 * episode.actions[-1, 0]) * 0.05, -8, 8)
        np.testing.assert_allclose(episode.observations[-1, 2], new_thetadot, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(episode.observations[-1, 0], np.cos(theta + new_thetadot * 0.05), atol=1e-5)


def test_action_noise_stays_in_bounds_and_is_seeded():
    env = make_env("Pendulum-v1", 2, backend="gymnasium")

    def record(noise: float, seed: int) -> np.ndarray:
        episodes = record_episodes(env, lambda obs: torch.zeros(2, 1), 2, action_noise=noise, seed=seed, progress=False)
        return np.concatenate([e.actions for e in episodes])[:, 0]

    try:
        quiet, noisy, again, other = record(0.0, 0), record(0.5, 0), record(0.5, 0), record(0.5, 1)
    finally:
        env.close()
    assert np.all(quiet == 0.0)
    # std 0.5 * (2 - -2) / 2 = 1, clipped at +-2 std: variance = P(|z|<2) - 4 phi(2) + 8 P(z>2)
    # = 0.9545 - 0.2160 + 0.1820 = 0.9205, std 0.959 (400 samples: standard error about 0.035).
    assert abs(noisy.std() - 0.959) < 0.1 and noisy.min() >= -2.0 and noisy.max() <= 2.0
    assert np.any(noisy == 2.0) and np.any(noisy == -2.0)  # clipped, not redrawn
    assert np.array_equal(noisy, again) and not np.array_equal(noisy, other)
    with pytest.raises(ConfigError, match="at least 0"):
        record(-0.1, 0)


# --------------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    from robopt.runner import train

    runs = tmp_path_factory.mktemp("runs")
    overrides = ["total_steps=512", f"log.run_root={runs}", "log.eval_episodes=0", "rollout.num_steps=256"]
    return train(load_config(ROOT / "configs" / "ppo_pendulum.yaml", overrides), progress=False).run_dir


def _collect(*args: str):
    return CliRunner().invoke(app, ["collect", *args, "--no-progress"])


def test_cli_collect_records_the_deterministic_policy(trained_run, tmp_path):
    from robopt.evaluation import load_policy

    result = _collect(str(trained_run), "--episodes", "3", "--out", "pend/ppo", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {tmp_path / 'pend' / 'ppo-v0'}: 3 episodes, 600 transitions, return ")
    demos = load_demonstrations("pend/ppo", root=tmp_path)
    assert demos.env_id == "Pendulum-v1" and demos.metadata["source"] == "run" and demos.num_episodes == 3
    _, policy = load_policy(trained_run)
    with torch.no_grad():
        action = policy.act(demos.obs, deterministic=True)[0].clamp(-2.0, 2.0)
    torch.testing.assert_close(demos.action, action, rtol=1e-5, atol=1e-5)

    again = _collect(str(trained_run), "--episodes", "1", "--out", "pend/ppo", "--root", str(tmp_path))
    assert again.exit_code == 2 and "already exists; use --force" in again.stderr
    assert again.stderr.count("\n") == 1 and load_demonstrations("pend/ppo", root=tmp_path).num_episodes == 3
    forced = _collect(str(trained_run), "--episodes", "1", "--out", "pend/ppo", "--root", str(tmp_path), "--force")
    assert forced.exit_code == 0 and load_demonstrations("pend/ppo", root=tmp_path).num_episodes == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["RUN", "--episodes", "0", "--out", "xx/y"], "--episodes must be at least 1"),
        (["RUN", "--episodes", "1", "--out", "xx/y", "--action-noise", "-1"], "--action-noise must be at least 0"),
        (["/nonexistent/run", "--episodes", "1", "--out", "xx/y"], "run directory '/nonexistent/run' not found"),
        (["RUN", "--episodes", "1", "--out", "bad name"], "bad dataset name"),
        (["RUN", "--out", "xx/y"], "missing --episodes"),
        (["--expert", "robopt/Nope", "--episodes", "1", "--out", "xx/y"], "no scripted expert for env 'robopt/Nope'"),
        (["RUN", "--expert", "robopt/MultiGoal", "--episodes", "1", "--out", "xx/y"], "not both"),
    ],
)
def test_cli_collect_bad_input(trained_run, tmp_path, args, message):
    args = [str(trained_run) if a == "RUN" else a for a in args]
    result = _collect(*args, "--root", str(tmp_path))
    assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.output
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_cli_collect_without_minari(trained_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari raises ImportError
    result = _collect(str(trained_run), "--episodes", "1", "--out", "xx/y", "--root", str(tmp_path))
    assert result.exit_code == 2 and "pip install 'robopt[data]'" in result.stderr


def test_cli_collect_scripted_expert(tmp_path):
    experts = pytest.importorskip("robopt.envs.experts")
    if "robopt/MultiGoal" not in experts.EXPERTS:
        pytest.skip("no MultiGoal expert")
    result = _collect(
        "--expert",
        "robopt/MultiGoal",
        "--episodes",
        "5",
        "--envs",
        "2",
        "--out",
        "goal/expert",
        "--root",
        str(tmp_path),
    )
    assert result.exit_code == 0, result.output
    episodes, info = read_episodes("goal/expert", root=tmp_path)
    assert len(episodes) == 5 and info.env_id == "robopt/MultiGoal" and info.metadata["source"] == "expert"
    for episode in episodes:  # every episode ends exactly once, at its last step
        ended = episode.terminations | episode.truncations
        assert ended[-1] and not ended[:-1].any()
