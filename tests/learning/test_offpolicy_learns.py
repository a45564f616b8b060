"""SAC, TD3 and DDPG reach a stated return on Pendulum-v1 within the CPU budget (about 30-40 s each on 2 cores)."""

from __future__ import annotations

import pytest

from robopt.evaluation import evaluate_run
from robopt.experiment import load_config
from robopt.runner import train


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config_path", "overrides"),
    [
        # measured -109.5 +- 65.6 at 8k steps; -112.0, -111.3, -125.0 at 5k (seeds 0-2, 64x64 nets, 10 episodes)
        ("configs/sac_pendulum.yaml", ["total_steps=5000"]),
        ("configs/td3_pendulum.yaml", []),  # measured -117.0 +- 69.2
        # DDPG is the least stable of the three: at 8k steps it measured -177.3 with Adam's default kernel and
        # -856.8 (half the episodes not swung up) with the fused kernel; -110.3 at 12k steps
        ("configs/td3_pendulum.yaml", ["algo.name=ddpg", "total_steps=12000"]),
    ],
    ids=["sac", "td3", "ddpg"],
)
def test_off_policy_pendulum_reaches_minus_400(tmp_path, config_path, overrides):
    # Random policy: about -1200; a swing-up controller: about -150.
    config = load_config(
        config_path,
        [
            "total_steps=8000",
            *overrides,
            f"log.run_root={tmp_path}",
            "log.progress=false",
            "policy.hidden=[64,64]",
            "algo.critic_hidden=[64,64]",
            "log.eval_episodes=0",
        ],
    )
    result = train(config)
    evaluation = evaluate_run(result.run_dir, episodes=10)
    assert evaluation.mean_return > -400, evaluation
