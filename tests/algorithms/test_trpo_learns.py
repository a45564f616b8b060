"""TRPO improves Pendulum-v1 within the CPU budget (about 20 s on 2 cores, so not marked slow)."""

from __future__ import annotations

from pathlib import Path

from robopt.evaluation import evaluate_run
from robopt.experiment import load_config
from robopt.runner import train


def test_trpo_pendulum_reaches_minus_400(tmp_path) -> None:
    # Random policy: about -1200; a swing-up controller: about -150. Seeds 0, 1, 2, 3 reached -179, -157, -158,
    # -214 (deterministic evaluation, 10 episodes) after 81,920 steps; -400 leaves slack. At 61,440 steps one
    # numerically different run of seed 0 still failed to swing up from some starts (-439), hence the budget.
    config = load_config(
        Path(__file__).resolve().parents[2] / "configs" / "trpo_pendulum.yaml",
        [f"log.run_root={tmp_path}", "log.progress=false"],
    )
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=10)
    assert evaluation.mean_return > -400, evaluation
