"""PPO's update path: per-minibatch advantage normalization, minibatch views, and the compiled step (issue 14).

The compiled step (``algo.compile``) must give the eager step's numbers: both run the same loss, clip and Adam,
the compiled one as one graph through torch.func, so they agree to float32 rounding. In the test below (18 Adam
steps that move the weights by 0.11) the two differ by about 1e-7; a learning rate 1% off moves them by 2e-3, no
gradient clip by 1.6e-2, a clip range of 0.21 instead of 0.2 by 1.4e-2.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robopt.algorithms.ppo import PPO, PPOConfig, normalize_per_minibatch, ppo_loss
from robopt.buffers.rollout import RolloutBatch
from robopt.config import ConfigError, build_dataclass
from robopt.core.advantages import normalize_advantage
from robopt.core.compiled import compile_unavailable_reason
from robopt.core.ratio_control import RatioControl
from robopt.experiment import ExperimentConfig
from robopt.policies import GaussianPolicy, ValueCritic

D, A = 5, 2
COMPILE_SKIP = compile_unavailable_reason("cpu")
WEIGHT_ATOL = 1e-6  # float32 rounding of the same arithmetic in another order; see the module docstring


def small_batch(policy: GaussianPolicy, size: int) -> RolloutBatch:
    """``size`` rows acted by ``policy`` on fixed observations, with fixed values, advantages and returns."""
    generator = torch.Generator().manual_seed(1)
    obs = 2.0 * torch.randn(size, D, generator=generator)  # [B, D]
    with torch.inference_mode():
        action, info = policy.act(obs)
    info = {key: value.clone() for key, value in info.items()}  # normal tensors, not inference ones
    no_end = torch.zeros(size, dtype=torch.bool)
    return RolloutBatch(
        obs=obs,
        action=action.clone(),
        policy_info=info,
        value=torch.randn(size, generator=generator),
        advantage=torch.randn(size, generator=generator),
        return_target=torch.randn(size, generator=generator),
        terminated=no_end,
        truncated=no_end,
    )


def test_normalize_per_minibatch_hand_worked():
    # Blocks of 4 then a remainder of 2. [1, 2, 3, 4]: mean 2.5, unbiased std sqrt((2.25 + 0.25) * 2 / 3) = 1.2909944,
    # so (x - 2.5) / 1.2909944 = -1.1618950, -0.3872983, 0.3872983, 1.1618950. [10, 20]: mean 15, std 7.0710678,
    # so -0.7071068, 0.7071068.
    advantage = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    expected = torch.tensor([-1.1618950, -0.3872983, 0.3872983, 1.1618950, -0.7071068, 0.7071068])
    torch.testing.assert_close(normalize_per_minibatch(advantage, 4), expected)


def test_normalize_per_minibatch_equals_normalizing_each_minibatch():
    advantage = 3.0 + 5.0 * torch.randn(200)  # 3 full blocks of 64 and a remainder of 8
    each = torch.cat([normalize_advantage(block) for block in advantage.split(64)])
    # row reductions of the [3, 64] blocks at once vs a full reduction per block (torch's std of a whole tensor
    # is another algorithm): the same numbers up to float rounding; the results are O(1): 1e-6
    torch.testing.assert_close(normalize_per_minibatch(advantage, 64), each, rtol=1e-6, atol=1e-6)


def test_split_gives_views_of_consecutive_rows():
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(8,))
    batch = small_batch(policy, 10)
    blocks = batch.split(4)
    assert [len(block) for block in blocks] == [4, 4, 2]
    assert torch.equal(blocks[1].obs, batch.obs[4:8]) and torch.equal(blocks[2].advantage, batch.advantage[8:])
    assert torch.equal(blocks[1].policy_info["log_prob"], batch.policy_info["log_prob"][4:8])
    assert blocks[0].obs.data_ptr() == batch.obs.data_ptr()  # a view, not a copy


def test_loss_without_metrics_is_the_same_loss():
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(8,))
    critic = ValueCritic(D, hidden=(8,))
    batch = small_batch(policy, 16)
    config = PPOConfig(value_clip=0.2, entropy_coef=0.01)
    control = RatioControl("dual_clip")
    with torch.no_grad():
        policy.log_std.add_(0.2)  # ratios off 1 so that clipping takes part
    loss, metrics = ppo_loss(policy, critic, batch, config, control, with_metrics=True)
    bare, empty = ppo_loss(policy, critic, batch, config, control, with_metrics=False)
    assert torch.equal(loss, bare) and empty == {}
    assert {"clip_fraction", "dual_clip_fraction", "value_loss", "policy_loss", "entropy"} <= set(metrics)


def test_compile_refuses_the_adaptive_kl_penalty_by_name():
    algo = {"name": "ppo", "compile": True, "ratio": {"name": "kl_penalty_adaptive"}}
    with pytest.raises(ConfigError, match="compile=true does not support ratio.name=kl_penalty_adaptive"):
        build_dataclass(ExperimentConfig, {"algo": algo})


def _train(config: PPOConfig, iterations: int = 2) -> tuple[torch.Tensor, torch.Tensor, list[dict], PPO]:
    """(weights before, weights after, metrics per update, algorithm) of ``iterations`` updates on a fixed batch."""
    torch.manual_seed(0)
    low, high = -torch.ones(A), torch.ones(A)
    policy = GaussianPolicy(D, A, low, high, hidden=(16, 16), squash=True)  # squash: pre_tanh in the info too
    critic = ValueCritic(D, hidden=(16, 16))
    batch = small_batch(policy, 96)  # 3 minibatches of 32: one shape, one compiled graph
    for module in (policy.normalizer, critic.normalizer):
        module.update(batch.obs)
    algorithm = PPO(config, policy, critic)
    initial = algorithm.updater.flat.detach().clone()
    torch.manual_seed(2)  # the minibatch orders
    metrics = []
    for iteration in range(iterations):
        metrics.append(algorithm.update(batch, progress=iteration / iterations))
        for module in (policy.normalizer, critic.normalizer):  # statistics change between updates
            module.update(batch.obs * (2.0 + iteration))
    return initial, algorithm.updater.flat.detach().clone(), metrics, algorithm


@pytest.mark.skipif(COMPILE_SKIP is not None, reason=f"torch.compile unavailable: {COMPILE_SKIP}")
def test_compiled_step_matches_eager_step():
    config = PPOConfig(
        epochs=3,
        minibatch_size=32,
        ratio=RatioControl("dual_clip"),
        value_clip=0.2,
        entropy_coef=0.01,
        minibatch_advantage_norm=True,
        learning_rate=1e-2,
    )
    initial, eager_weights, eager_metrics, eager = _train(config)
    _, compiled_weights, compiled_metrics, compiled = _train(dataclasses.replace(config, compile=True))
    assert compiled.compiled_step is not None and eager.compiled_step is None
    moved = float((eager_weights - initial).abs().max())
    assert moved > 1e-2, f"the updates barely moved the weights ({moved:.1e}): the comparison would prove nothing"
    difference = float((eager_weights - compiled_weights).abs().max())
    assert difference < WEIGHT_ATOL, f"compiled weights differ from eager by {difference:.2e}"
    assert compiled.updater.step_count == eager.updater.step_count == 2 * 3 * 3
    torch.testing.assert_close(compiled.updater.exp_avg_sq, eager.updater.exp_avg_sq, rtol=1e-4, atol=1e-10)
    for eager_row, compiled_row in zip(eager_metrics, compiled_metrics):
        assert set(eager_row) == set(compiled_row)
        for key, value in eager_row.items():
            torch.testing.assert_close(compiled_row[key], value, rtol=1e-5, atol=1e-6, msg=key)


class HostSyncPolicy(GaussianPolicy):
    """A log-ratio that reads a value back to Python, which one compiled graph cannot capture."""

    def log_ratio(self, obs, action, info):
        log_ratio = super().log_ratio(obs, action, info)
        return log_ratio * 1.0 if float(log_ratio.sum()) > -1e9 else log_ratio


@pytest.mark.skipif(COMPILE_SKIP is not None, reason=f"torch.compile unavailable: {COMPILE_SKIP}")
def test_a_step_compile_cannot_capture_fails_with_one_line():
    policy = HostSyncPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(8,))
    algorithm = PPO(PPOConfig(compile=True, epochs=1, minibatch_size=8), policy, ValueCritic(D, hidden=(8,)))
    with pytest.raises(ConfigError, match=r"algo.compile=true: torch.compile could not build the PPO step \(.*"):
        algorithm.update(small_batch(policy, 8), progress=0.0)


def test_drift_metrics_off_skips_the_after_update_pass_and_changes_no_weight():
    config = PPOConfig(epochs=2, minibatch_size=32)
    _, with_drift, metrics_on, _ = _train(config)
    _, without, metrics_off, _ = _train(dataclasses.replace(config, drift_metrics=False))
    torch.testing.assert_close(without, with_drift, rtol=0, atol=0)  # a no-grad diagnostic: the same update
    assert "batch_approx_kl" in metrics_on[0] and not any(key.startswith("batch_") for key in metrics_off[0])
    algo = {"name": "ppo", "drift_metrics": False, "ratio": {"name": "kl_penalty_adaptive"}}
    with pytest.raises(ConfigError, match="set drift_metrics=true"):
        build_dataclass(ExperimentConfig, {"algo": algo})
