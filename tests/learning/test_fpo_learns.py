"""FPO (flow policy) learns the multimodal point-mass task within the CPU budget (well under a minute)."""

from __future__ import annotations

import pytest

from robopt.evaluation import evaluate_run
from robopt.experiment import load_config
from robopt.runner import train


@pytest.mark.slow
def test_fpo_multigoal_reaches_a_goal_every_episode(tmp_path):
    # The initial deterministic flow policy (x_0 = 0, velocity near 0) stands still: return about -5 over 50 steps.
    # Reaching a goal gives +10 minus the shaping on the way: about 9.7 when going straight to one.
    config = load_config(
        "configs/fpo_multimodal.yaml",
        [f"log.run_root={tmp_path}", "log.progress=false", "total_steps=120000", "log.eval_episodes=0"],
    )
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=50)
    assert evaluation.mean_return > 9.0, evaluation
