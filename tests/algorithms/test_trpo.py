"""TRPO: build-time protocol checks, the KL bound on real batches, EnTRPO's accumulated entropy, configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from robopt.algorithms.trpo import TRPO, TRPOConfig, entropy_to_go
from robopt.build import build_loop
from robopt.config import ConfigError, build_dataclass
from robopt.experiment import ExperimentConfig, load_config
from robopt.policies import GaussianPolicy, ValueCritic

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def pendulum_config(**algo) -> ExperimentConfig:
    return build_dataclass(
        ExperimentConfig,
        {
            "seed": 0,
            "env": {"id": "Pendulum-v1", "num_envs": 4},
            "rollout": {"num_steps": 256, "gamma": 0.9, "gae_lambda": 0.95, "normalize_reward": True},
            "algo": {"name": "trpo", **algo},
        },
    )


class NoKLPolicy(nn.Module):
    """A policy without ``kl`` (e.g. a flow policy): TRPO must refuse it at build time."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))


def test_trpo_refuses_a_policy_without_kl() -> None:
    with pytest.raises(TypeError, match="TRPO needs a policy that SupportsKL: NoKLPolicy does not"):
        TRPO(TRPOConfig(), NoKLPolicy(), ValueCritic(3))


def test_config_rejects_bad_values_by_name() -> None:
    with pytest.raises(ConfigError, match="max_kl"):
        build_dataclass(ExperimentConfig, {"algo": {"name": "trpo", "max_kl": -1.0}})
    with pytest.raises(ConfigError, match="algo.ratio.name: 'ppo' is not allowed"):
        build_dataclass(ExperimentConfig, {"algo": {"name": "trpo", "ratio": {"name": "ppo"}}})


def test_default_ratio_control_is_plain() -> None:
    assert pendulum_config().algo.ratio.name == "plain"
    assert pendulum_config(ratio={"name": "spo_penalty"}).algo.ratio.name == "spo_penalty"


@pytest.mark.parametrize("fisher_subsample", [1, 4])
def test_kl_bound_holds_after_every_update_on_real_batches(fisher_subsample: int) -> None:
    max_kl = 0.01
    config = pendulum_config(
        max_kl=max_kl, critic_epochs=2, critic_minibatch_size=256, fisher_subsample=fisher_subsample
    )
    loop = build_loop(config)
    policy, algorithm = loop.policy, loop.algorithm
    for iteration in range(4):
        loop.collect()
        batch = loop.advantages()
        metrics = algorithm.update(batch, progress=iteration / 4)
        with torch.no_grad():
            kl_after = policy.kl(batch.obs, batch.policy_info).mean().item()
        assert metrics["rejected"].item() == 0.0
        assert kl_after <= max_kl * (1.0 + 1e-5), f"iteration {iteration}: KL {kl_after} > {max_kl}"
        assert kl_after == pytest.approx(metrics["kl"].item(), rel=1e-4)
        if fisher_subsample == 1:  # a subsampled Fisher is a noisier model (one step reached 1.6x): bound only after
            assert metrics["kl_full_step"].item() <= 1.5 * max_kl, "quadratic model off by more than 1.5x"
        assert metrics["surrogate_improvement"].item() > 0.0
        policy.normalizer.update(batch.obs)
        loop.critic.normalizer.update(batch.obs)


def test_entropy_to_go_hand_worked() -> None:
    # One env, H = [1, 2, 3], discount 0.5, no episode end: E2 = 3, E1 = 2 + 0.5 * 3 = 3.5, E0 = 1 + 0.5 * 3.5 = 2.75.
    entropy = torch.tensor([[1.0], [2.0], [3.0]])
    no_end = torch.zeros(3, 1, dtype=torch.bool)
    torch.testing.assert_close(entropy_to_go(entropy, no_end, 0.5), torch.tensor([[2.75], [3.5], [3.0]]))
    # Episode ends at t = 1: E2 = 3 (new episode), E1 = 2 (cut), E0 = 1 + 0.5 * 2 = 2.
    end = torch.tensor([[False], [True], [False]])
    torch.testing.assert_close(entropy_to_go(entropy, end, 0.5), torch.tensor([[2.0], [2.0], [3.0]]))


def test_entropy_regularized_advantage() -> None:
    # T = 2, N = 2 (rows t-major: (t0, e0), (t0, e1), (t1, e0), (t1, e1)). log_std = 0 in 1-D:
    # H = 0.5 log(2 pi e) = 1.418939 everywhere. Env 0 runs on: E = [H + 0.5 H, H] = [2.128408, 1.418939];
    # env 1 ends at t0: E = [H, H]. With alpha = 0.1 and A = 0: A' = 0.1 E.
    policy = GaussianPolicy(3, 1, torch.tensor([-2.0]), torch.tensor([2.0]))
    algorithm = TRPO(TRPOConfig(), policy, ValueCritic(3))
    algorithm.config = dataclasses.replace(TRPOConfig(), entropy_coef=0.1, entropy_discount=0.5)
    batch = SimpleNamespace(
        obs=torch.zeros(4, 3),
        advantage=torch.zeros(4),
        terminated=torch.tensor([False, True, False, False]),
        truncated=torch.zeros(4, dtype=torch.bool),
        num_envs=2,
    )
    h = 1.4189385
    expected = 0.1 * torch.tensor([h + 0.5 * h, h, h, h])
    torch.testing.assert_close(algorithm.advantage(batch), expected)


@pytest.mark.parametrize("name", ["trpo_hopper", "trpo_halfcheetah"])
def test_trpo_configs_load(name: str) -> None:
    config = load_config(CONFIGS / f"{name}.yaml")
    assert isinstance(config.algo, TRPOConfig)
    assert config.algo.ratio.name == "plain"


def test_adaptive_kl_coef_is_updated_and_checkpointed() -> None:
    # kl_penalty_adaptive inside the trust region: the accepted step's KL (<= 0.01 = delta) is compared with the
    # target 0.1: KL < 0.1 / 1.5 -> beta halves from 1.0 to 0.5; the state dict carries it.
    loop = build_loop(
        pendulum_config(critic_epochs=1, ratio={"name": "kl_penalty_adaptive", "kl_coef": 1.0, "kl_target": 0.1})
    )
    loop.collect()
    loop.algorithm.update(loop.advantages(), progress=0.0)
    assert loop.algorithm.ratio.kl_coef == pytest.approx(0.5)
    state = loop.algorithm.state_dict()
    fresh = TRPO(loop.algorithm.config, loop.policy, loop.critic)
    assert fresh.ratio.kl_coef == pytest.approx(1.0)
    fresh.load_state_dict(state)
    assert fresh.ratio.kl_coef == pytest.approx(0.5)
    assert fresh.ratio.name == "kl_penalty_adaptive"


def test_entrpo_through_the_loop() -> None:
    # Pendulum truncates every env at t = 199 (200-step episodes); 4 envs x 256 steps, log_std = 0 in 1-D so
    # H = 0.5 log(2 pi e) = 1.418939 in every state. With alpha = 0.01 and discount d = 0.855 the bonus is
    #   t = 0:   alpha H (1 - d^200) / (1 - d) = 0.01 * 1.418939 / 0.145 = 0.097858  (d^200 ~ 2e-14)
    #   t = 199: alpha H = 0.014189 (the episode ends there, nothing accumulates from t = 200)
    #   t = 255: alpha H = 0.014189 (last row of the rollout)
    loop = build_loop(pendulum_config(entropy_coef=0.01, entropy_discount=0.855, critic_epochs=1))
    loop.collect()
    batch = loop.advantages()
    bonus = (loop.algorithm.advantage(batch) - batch.advantage).reshape(256, 4)  # [T, N]
    torch.testing.assert_close(bonus[0], torch.full((4,), 0.097858), atol=1e-5, rtol=0)
    torch.testing.assert_close(bonus[199], torch.full((4,), 0.014189), atol=1e-5, rtol=0)
    torch.testing.assert_close(bonus[255], torch.full((4,), 0.014189), atol=1e-5, rtol=0)
    metrics = loop.algorithm.update(batch, progress=0.0)
    assert metrics["rejected"].item() == 0.0
    assert metrics["kl"].item() <= 0.01 * (1 + 1e-5)
