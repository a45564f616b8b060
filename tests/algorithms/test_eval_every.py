"""Deterministic evaluations during training (``log.eval_every``): when they run, what they log, and that the run
trains exactly as it does without them."""

from __future__ import annotations

import csv

import pytest
import torch

from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.experiment import ExperimentConfig
from robopt.runner import train


def config(tmp_path, **log) -> ExperimentConfig:
    return build_dataclass(
        ExperimentConfig,
        {
            "name": "ppo_eval_every",
            "seed": 2,
            "total_steps": 1024,
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "policy": {"hidden": [16, 16]},
            "rollout": {"num_steps": 64},
            "algo": {"name": "ppo", "epochs": 2, "minibatch_size": 64},
            "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 2, **log},
        },
    )


def test_evaluations_every_n_steps_are_logged_and_change_nothing(tmp_path):
    plain = train(config(tmp_path))
    evaluated = train(config(tmp_path, eval_every=300))  # iterations of 128 steps: the first ones past 300, 600, 900
    with open(evaluated.run_dir / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    steps = [int(float(row["env_steps"])) for row in rows if row.get("eval_return")]
    assert steps == [384, 640, 1024]
    values = [float(row["eval_return"]) for row in rows if row.get("eval_return")]
    assert all(-2000.0 < value < 0.0 for value in values)  # Pendulum returns over 200 steps
    a = load_checkpoint(plain.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    b = load_checkpoint(evaluated.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    for key, value in a.items():  # the evaluations restore every RNG stream: the same training
        torch.testing.assert_close(b[key], value, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ({"eval_every": -1}, "eval_every and eval_episodes must be >= 0"),
        ({"eval_every": 100, "eval_episodes": 0}, "eval_every=100 needs eval_episodes > 0"),
    ],
)
def test_bad_eval_every_is_one_line(tmp_path, log, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, **log)
