"""LeRobot datasets: robopt reads the one LeRobot's own writer made (tests/data/lerobot_tiny), writes files of the same
layout and types, round-trips its own, trains from either format alike, and refuses what it cannot read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from robopt.data.demonstrations import load_demonstrations, read_episodes
from robopt.data.lerobot_format import read_lerobot, write_lerobot
from robopt.data.recording import Episode
from robopt.options import ConfigError

FIXTURE = Path(__file__).parents[1] / "data" / "lerobot_tiny"
ROOT = Path(__file__).parents[2]


def fixture_episodes() -> list[Episode]:
    """The fixture's content, as its README builds it: state (v, v + 0.5, -v) and action (v / 10, -v / 10) with
    v = 100 * episode + t; reward 1 and done at each episode's last frame; only episode 0 a success."""
    episodes = []
    for episode, length in enumerate((5, 3)):
        value = 100 * episode + np.arange(length, dtype=np.float32)
        state = np.stack([value, value + 0.5, -value], axis=1)
        last = np.arange(length) == length - 1
        episodes.append(
            Episode(
                observations=np.concatenate([state, state[-1:]]),  # LeRobot keeps no final observation: repeated
                actions=np.stack([value / 10, -value / 10], axis=1).astype(np.float32),
                rewards=last.astype(np.float32),
                terminations=last,
                truncations=np.zeros(length, dtype=bool),
                success=episode == 0,
            )
        )
    return episodes


def assert_same_episodes(read: list[Episode], expected: list[Episode]) -> None:
    assert len(read) == len(expected)
    for got, want in zip(read, expected):
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert got.success == want.success


def test_reads_the_dataset_lerobots_own_writer_made():
    episodes, env_id, metadata = read_lerobot(FIXTURE)
    assert_same_episodes(episodes, fixture_episodes())
    assert env_id == "" and metadata["fps"] == 25 and metadata["episode_success"] == [True, False]


def test_writes_the_layout_and_types_lerobot_writes(tmp_path):
    """Same fixture content written by robopt: info.json, every parquet file's columns and arrow types, the tasks
    file's pandas index and the statistics' names, as LeRobot's writer made them. (The features' element names and
    robot_type, which robopt does not know, are null.)"""
    path = write_lerobot(tmp_path / "tiny", fixture_episodes(), "robopt/Test", 25, "reach the point")
    ours, theirs = (json.loads((p / "meta/info.json").read_text()) for p in (path, FIXTURE))
    assert ours.keys() == theirs.keys()
    for spec in theirs["features"].values():
        spec["names"] = None
    theirs["robot_type"] = None
    assert ours == theirs
    for file in ("data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet", "meta/tasks.parquet"):
        mine, reference = pq.read_schema(path / file), pq.read_schema(FIXTURE / file)
        assert [(f.name, str(f.type)) for f in mine] == [(f.name, str(f.type)) for f in reference], file
    pandas = json.loads(pq.read_schema(path / "meta/tasks.parquet").metadata[b"pandas"])
    assert pandas["index_columns"] == ["task"]
    assert pq.read_table(path / "meta/tasks.parquet").column("task").to_pylist() == ["reach the point"]
    ours, theirs = (json.loads((p / "meta/stats.json").read_text()) for p in (path, FIXTURE))
    assert {k: sorted(v) for k, v in ours.items()} == {k: sorted(v) for k, v in theirs.items()}
    # statistics LeRobot computes exactly (its quantiles are approximations, robopt's exact: not compared)
    for feature in ("observation.state", "action"):
        for stat in ("min", "max", "mean", "count"):
            np.testing.assert_allclose(ours[feature][stat], theirs[feature][stat], rtol=1e-6)


def test_a_dataset_robopt_writes_reads_back_with_terminations_truncations_and_success(tmp_path):
    episodes = fixture_episodes()
    truncated = episodes[1]  # a time-limit end: not done, so read back as truncated
    episodes[1] = Episode(
        truncated.observations, truncated.actions, truncated.rewards, np.zeros(3, bool), np.arange(3) == 2, False
    )
    path = write_lerobot(tmp_path / "mixed", episodes, "robopt/MultiGoal", 25, "t", metadata={"source": "test"})
    read, env_id, metadata = read_lerobot(path)
    assert_same_episodes(read, episodes)
    assert env_id == "robopt/MultiGoal" and metadata["source"] == "test"
    with pytest.raises(ConfigError, match="already exists; pass --force"):
        write_lerobot(path, episodes, "robopt/MultiGoal", 25, "t")


def test_demonstrations_load_from_a_lerobot_folder():
    demos = load_demonstrations(FIXTURE)
    assert demos.obs.shape == (8, 3) and demos.action.shape == (8, 2) and demos.num_episodes == 2
    assert demos.episode_index.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert float(demos.action[6, 0]) == pytest.approx(10.1)


def _copy_fixture(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "copy"))


def test_what_is_not_a_readable_lerobot_dataset_is_a_one_line_error(tmp_path):
    broken = _copy_fixture(tmp_path)
    (broken / "meta/info.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not a LeRobot dataset: meta/info.json is unreadable"):
        read_episodes(broken)
    info = json.loads((FIXTURE / "meta/info.json").read_text())
    (broken / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(ConfigError, match="is format v2.1; robopt reads v3.0"):
        read_episodes(broken)
    images = {"observation.images.top": {"dtype": "video", "shape": [96, 96, 3], "names": None}}
    features = {k: v for k, v in info["features"].items() if k != "observation.state"}
    (broken / "meta/info.json").write_text(json.dumps({**info, "features": {**features, **images}}))
    with pytest.raises(ConfigError, match=r"images only \(observation.images.top\).*not supported yet"):
        read_episodes(broken)
    (broken / "meta/info.json").write_text(json.dumps(info))
    shutil.rmtree(broken / "data")
    with pytest.raises(ConfigError, match="has no data files"):
        read_episodes(broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="neither a Minari dataset .* nor a LeRobot dataset"):
        read_episodes(empty)


def test_pretrain_refuses_a_lerobot_dataset_of_another_width_in_one_line(tmp_path):
    """robopt/MultiGoal has a 3-wide state and 2-wide action; a 4-wide state is refused before any training."""
    wide = [
        Episode(np.zeros((4, 4), np.float32), np.zeros((3, 2), np.float32), np.zeros(3, np.float32),
                np.arange(3) == 2, np.zeros(3, bool))
    ]  # fmt: skip
    path = write_lerobot(tmp_path / "wide", wide, "", 25, "t")
    config = tmp_path / "bc.yaml"
    config.write_text(
        "name: bc_wide\nenv: {id: robopt/MultiGoal, num_envs: 2}\npolicy: {name: gaussian}\n"
        f"algo: {{name: bc, dataset: {path}, epochs: 1}}\nlog: {{run_root: {tmp_path / 'runs'}, eval_episodes: 0}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "robopt", "pretrain", str(config)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2, done.stderr
    assert "observation size 4 and action size 2, but env 'robopt/MultiGoal' has observation size 3" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
