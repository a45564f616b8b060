"""PPO reaches a stated return on Pendulum-v1 within the CPU budget (about a minute on 2 cores)."""

from __future__ import annotations

import pytest

from robopt.evaluation import evaluate_run
from robopt.experiment import load_config
from robopt.runner import train


@pytest.mark.slow
def test_ppo_pendulum_reaches_minus_400(tmp_path):
    # Random policy: about -1200; a swing-up controller: about -150. Threshold -400 leaves seed slack.
    config = load_config("configs/ppo_pendulum.yaml", [f"log.run_root={tmp_path}", "log.progress=false"])
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=10)
    assert evaluation.mean_return > -400, evaluation
