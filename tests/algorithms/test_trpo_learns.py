"""TRPO improves Pendulum-v1 within the CPU budget (about 25 s on 2 cores, so not marked slow)."""

from __future__ import annotations

from pathlib import Path

from robopt.algorithms.trpo import register
from robopt.config import load_config
from robopt.evaluation import evaluate_run
from robopt.runner import train


def test_trpo_pendulum_reaches_minus_400(tmp_path) -> None:
    # Random policy: about -1200; a swing-up controller: about -150. Seeds 0, 1, 2 reached -163, -146, -160
    # (deterministic evaluation, 10 episodes) after 61,440 steps; -400 leaves seed slack.
    register()
    config = load_config(
        Path(__file__).resolve().parents[2] / "configs" / "trpo_pendulum.yaml",
        [f"log.run_root={tmp_path}", "log.progress=false"],
    )
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=10)
    assert evaluation.mean_return > -400, evaluation
