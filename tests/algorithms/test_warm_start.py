"""Warm starts that load nothing: an explicit ``init_critic_from`` without Q critics is one line and exit 2; a
behaviour-cloning ``init_from`` (no critics) is said once and the run goes on with fresh critics.

The source runs are made by hand (a config.yaml and a checkpoint holding what such a run saves): a PPO run keeps
its value critic outside the algorithm's state, so an off-policy algorithm finds no critic, target_critic or value.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, save_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.experiment import ExperimentConfig

POLICY = {"name": "gaussian", "squash": True, "hidden": [16], "activation": "relu", "normalize_obs": False}


def sac_data(tmp_path: Path, **extra) -> dict:
    return {
        "name": "warm",
        "env": {"id": "Pendulum-v1", "num_envs": 1},
        "policy": POLICY,
        "algo": {"name": "sac", "critic_hidden": [16], "loop": {"learning_starts": 10, "batch_size": 8}},
        "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 0},
        **extra,
    }


def fake_run(path: Path, algo: str, loop_state: dict) -> Path:
    (path / "checkpoints").mkdir(parents=True)
    data = {"env": {"id": "Pendulum-v1"}, "policy": POLICY, "algo": {"name": algo}}
    (path / "config.yaml").write_text(yaml.safe_dump(data))
    save_checkpoint(path / LAST_CHECKPOINT, {"loop": loop_state})
    return path


def test_init_critic_from_a_run_without_q_critics_is_one_line(tmp_path):
    ppo = fake_run(tmp_path / "ppo", "ppo", {"policy": {}, "critic": {}, "algorithm": {"optimizer": {}}})
    config = build_dataclass(ExperimentConfig, sac_data(tmp_path, init_critic_from=str(ppo)))
    with pytest.raises(ConfigError, match="holds no Q critics .*it is a ppo run") as error:
        build_loop(config, initialize=True)
    assert "\n" not in str(error.value)

    from robopt.cli import app

    path = tmp_path / "sac.yaml"
    path.write_text(yaml.safe_dump(sac_data(tmp_path)))
    result = CliRunner().invoke(app, ["train", str(path), f"init_critic_from={ppo}", "--no-progress"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds no Q critics" in lines[0], result.output


def test_a_behaviour_cloning_init_from_loads_no_critics_and_says_so_once(tmp_path, capsys):
    config = build_dataclass(ExperimentConfig, sac_data(tmp_path))
    fresh = build_loop(config, initialize=True)
    fresh.env.close()
    bc = fake_run(tmp_path / "bc", "bc", {"policy": fresh.policy.state_dict(), "algorithm": {"optimizer": {}}})
    loop = build_loop(dataclasses.replace(config, init_from=str(bc)), initialize=True)
    loop.env.close()
    said = [line for line in capsys.readouterr().out.splitlines() if "holds no Q critics" in line]
    assert len(said) == 1 and "the critics start fresh" in said[0]
