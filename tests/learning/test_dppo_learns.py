"""DPPO (diffusion policy) learns Pendulum from scratch within the CPU budget (about a minute on 2 cores)."""

from __future__ import annotations

import pytest

from robopt.evaluation import evaluate_run
from robopt.experiment import load_config
from robopt.runner import train


@pytest.mark.slow
def test_dppo_pendulum_swings_up(tmp_path):
    # The initial diffusion policy acts about at random: Pendulum returns about -1200 over 200 steps. A policy
    # that swings up and balances scores above -200 from most starts; -500 needs most episodes swung up.
    config = load_config(
        "configs/dppo_pendulum.yaml", [f"log.run_root={tmp_path}", "log.progress=false", "log.eval_episodes=0"]
    )
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=20)
    assert evaluation.mean_return > -500.0, evaluation
