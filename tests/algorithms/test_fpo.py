"""FPO and the flow policy in configs: bad keys, refused pairings (TRPO, entropy bonus, FPO with a Gaussian), FPO's
default clip, the CLI's one-line errors, and every ratio control running FPO updates in both ratio modes."""

from __future__ import annotations

import math

import pytest
import torch

from robopt.config import ConfigError, build_dataclass
from robopt.core.ratio_control import adapt_kl_coef
from robopt.experiment import ExperimentConfig


def _experiment(tmp_path, algo: dict, policy: dict) -> dict:
    if algo["name"] != "trpo":  # PPO's and FPO's update: one epoch of one minibatch
        algo = {"epochs": 1, "minibatch_size": 64, **algo}
    return {
        "name": "flow_small",
        "total_steps": 64,
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "policy": {"hidden": [16], **policy},
        "critic": {"hidden": [16]},
        "rollout": {"num_steps": 32},
        "algo": algo,
        "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 0},
    }


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"steps": 0}, "policy: steps must be >= 1 (integration steps), got 0"),
        ({"draws": 0}, "policy: draws must be >= 1 (Monte Carlo draws per action), got 0"),
        ({"time_embedding": 5}, "policy: time_embedding must be an even number >= 2, got 5"),
        ({"integrator": "rk4"}, "policy.integrator: 'rk4' is not allowed; allowed: euler, midpoint, heun"),
        ({"log_std_init": -0.5}, "unknown config key 'policy.log_std_init'; allowed: activation, draws, edit_bound"),
        ({"squash": True}, "unknown config key 'policy.squash'"),
    ],
)
def test_bad_flow_config_names_the_key(tmp_path, policy, message):
    with pytest.raises(ConfigError) as error:
        build_dataclass(ExperimentConfig, _experiment(tmp_path, {"name": "fpo"}, {"name": "flow", **policy}))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("algo", "policy", "error_type", "message"),
    [
        (
            {"name": "trpo"}, "flow", (TypeError, ConfigError),
            "TRPO needs a policy that SupportsKL: FlowPolicy does not (the trust region bounds the closed-form mean KL",
        ),
        (
            {"name": "ppo", "entropy_coef": 0.01}, "flow", (TypeError, ConfigError),
            "PPO with entropy_coef > 0 needs a policy that SupportsEntropy: FlowPolicy does not",
        ),
        (
            {"name": "fpo"}, "gaussian", ConfigError,
            "algo.name=fpo needs policy.name=flow (its ratio comes from flow-matching losses), got GaussianPolicy",
        ),
    ],
    ids=["trpo_flow", "ppo_entropy_flow", "fpo_gaussian"],
)  # fmt: skip
def test_impossible_pairings_are_refused_when_built(tmp_path, algo, policy, error_type, message):
    from robopt.build import build_loop

    config = build_dataclass(ExperimentConfig, _experiment(tmp_path, algo, {"name": policy}))
    with pytest.raises(error_type) as error:
        build_loop(config)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_fpo_with_adaptive_kl_penalty_runs_an_update(tmp_path):
    from robopt.build import build_loop

    algo = {"name": "fpo", "ratio": {"name": "kl_penalty_adaptive"}}
    loop = build_loop(build_dataclass(ExperimentConfig, _experiment(tmp_path, algo, {"name": "flow", "draws": 2})))
    try:
        metrics = loop.iteration(progress=0.0)
    finally:
        loop.env.close()
    assert all(math.isfinite(value) for value in metrics.values())
    assert metrics["batch_approx_kl"] > 0  # the update moved the policy (k3 on the flow log-ratio)
    # beta is adapted from the measured KL: halved below 0.01 / 1.5, doubled above 0.01 * 1.5
    assert loop.algorithm.control.kl_coef == adapt_kl_coef(1.0, metrics["batch_approx_kl"], 0.01)


def test_fpo_default_clip_range_reaches_the_config():
    config = build_dataclass(ExperimentConfig, {"policy": {"name": "flow"}, "algo": {"name": "fpo"}})
    assert config.algo.ratio.clip_low == 0.05
    config = build_dataclass(
        ExperimentConfig, {"policy": {"name": "flow"}, "algo": {"name": "fpo", "ratio": {"clip_low": 0.1}}}
    )
    assert config.algo.ratio.clip_low == 0.1


def _cli_train(tmp_path, algo: dict, policy: dict):
    import yaml
    from typer.testing import CliRunner

    from robopt.cli import app

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_experiment(tmp_path, algo, policy)))
    return CliRunner().invoke(app, ["train", str(path), "--no-progress"])


def test_cli_refuses_fpo_with_a_gaussian_policy_in_one_line(tmp_path):
    result = _cli_train(tmp_path, {"name": "fpo"}, {"name": "gaussian"})
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "robopt: error: algo.name=fpo needs policy.name=flow (its ratio comes from flow-matching losses), "
        "got GaussianPolicy"
    ]


def test_cli_refuses_trpo_with_a_flow_policy_in_one_line(tmp_path):
    result = _cli_train(tmp_path, {"name": "trpo"}, {"name": "flow"})
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "SupportsKL: FlowPolicy does not" in result.stderr


@pytest.mark.parametrize(
    "ratio",
    [
        {"name": "plain"},
        {"name": "clip"},
        {"name": "clip_asymmetric", "clip_high": 0.1},
        {"name": "dual_clip"},
        {"name": "spo_penalty"},
        {"name": "sigmoid_gate"},
    ],
    ids=lambda ratio: ratio["name"],
)
@pytest.mark.parametrize("ratio_mode", ["per_draw", "average"])
def test_every_ratio_control_runs_fpo_updates(tmp_path, ratio, ratio_mode):
    from robopt.build import build_loop

    policy = {"name": "flow", "draws": 3, "ratio_mode": ratio_mode}
    loop = build_loop(build_dataclass(ExperimentConfig, _experiment(tmp_path, {"name": "fpo", "ratio": ratio}, policy)))
    before = [p.detach().clone() for p in loop.policy.parameters()]
    try:
        metrics = loop.iteration(progress=0.0)
    finally:
        loop.env.close()
    assert all(math.isfinite(value) for value in metrics.values())
    assert metrics["batch_approx_kl"] > 0.0  # the policy moved under every control
    assert not all(torch.equal(b, p) for b, p in zip(before, loop.policy.parameters()))
