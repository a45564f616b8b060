"""DPPO: the denoising discount and clip schedule by hand, the per-entry clip of the shared surrogate, pair
minibatches, the direction of an update, refused pairings, resume with the frozen base, PPO and TRPO over a
diffusion policy, and behaviour cloning of action chunks."""

from __future__ import annotations

import math

import pytest
import torch

from robopt.algorithms.bc import chunk_actions
from robopt.algorithms.dppo import DPPO, DPPOConfig, DPPORatioControl, clip_schedule, denoising_weights
from robopt.buffers.rollout import RolloutBatch
from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.core.ratio_control import RatioControl
from robopt.core.surrogates import surrogate
from robopt.experiment import ExperimentConfig
from robopt.policies.critics import ValueCritic
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig
from robopt.runner import train


def _experiment(tmp_path, algo: dict, policy: dict | None = None, total_steps: int = 128) -> ExperimentConfig:
    small = {"name": "diffusion", "hidden": [16], "denoising_steps": 6, "ft_steps": 3, "ddim_steps": 2}
    policy = policy if policy and "name" in policy else {**small, **(policy or {})}
    return build_dataclass(
        ExperimentConfig,
        {
            "name": "dppo_small",
            "total_steps": total_steps,
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "policy": policy,
            "critic": {"hidden": [16]},
            "rollout": {"num_steps": 32},
            "algo": algo,
            "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 0},
        },
    )


def test_denoising_discount_and_clip_schedule_by_hand():
    assert torch.allclose(denoising_weights(4, 0.9), torch.tensor([0.729, 0.81, 0.9, 1.0]))
    middle = 0.001 + 0.009 * (math.exp(1.5) - 1.0) / (math.exp(3.0) - 1.0)
    assert torch.allclose(clip_schedule(3, 0.001, 0.01, 3.0), torch.tensor([0.001, middle, 0.01]))
    assert torch.allclose(clip_schedule(5, 0.01, 0.01, 3.0), torch.full((5,), 0.01))
    assert torch.allclose(clip_schedule(3, 0.1, 0.3, 0.0), torch.tensor([0.1, 0.2, 0.3]))  # linear at rate 0
    assert torch.allclose(clip_schedule(1, 0.001, 0.02, 3.0), torch.tensor([0.02]))


def test_surrogate_per_entry_clip_range_by_hand():
    log_ratio = torch.log(torch.tensor([[1.5], [1.5], [0.5]]))
    advantage = torch.tensor([1.0, 1.0, -2.0])
    clip = torch.tensor([[0.1], [0.6], [0.2]])
    loss, metrics = surrogate(log_ratio, advantage, RatioControl(), clip_range=clip)
    # row 0: min(1.5, 1.1) = 1.1; row 1: min(1.5, 1.5) = 1.5; row 2: min(-1.0, 0.8 * -2 = -1.6) = -1.6
    assert loss.item() == pytest.approx(-(1.1 + 1.5 - 1.6) / 3)
    assert metrics["clip_fraction"].item() == pytest.approx(2 / 3)
    scalar, _ = surrogate(log_ratio, advantage, RatioControl(clip_low=0.2))
    same, _ = surrogate(log_ratio, advantage, RatioControl(clip_low=0.5), clip_range=torch.full((3, 1), 0.2))
    assert same.item() == pytest.approx(scalar.item())


def _rollout(policy: DiffusionPolicy, rows: int, advantage: float) -> RolloutBatch:
    obs = torch.randn(rows, policy.obs_dim)
    action, info = policy.act(obs)
    zeros = torch.zeros(rows)
    return RolloutBatch(
        obs=obs,
        action=action,
        policy_info=info,
        value=zeros,
        advantage=torch.full((rows,), advantage),
        return_target=zeros,
        terminated=zeros.bool(),
        truncated=zeros.bool(),
    )


def _small_policy(**overrides) -> DiffusionPolicy:
    torch.manual_seed(0)
    config = DiffusionPolicyConfig(hidden=(16,), denoising_steps=6, ft_steps=3, ddim_steps=2, **overrides)
    return DiffusionPolicy(2, 1, -torch.ones(1), torch.ones(1), config)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_update_moves_the_log_probability_of_the_chains_with_the_advantage(sign):
    policy = _small_policy()
    policy.freeze_base()
    critic = ValueCritic(2, (16,))
    batch = _rollout(policy, 64, sign)
    ratio = DPPORatioControl(clip_low=0.2)
    config = DPPOConfig(learning_rate=1e-3, epochs=3, minibatch_size=48, ratio=ratio, clip_base=0.2)
    DPPO(config, policy, critic).update(batch, 0.0)
    with torch.no_grad():
        moved = policy.log_ratio(batch.obs, batch.action, batch.policy_info)  # [B, K']
    assert moved.shape == (64, 3)
    assert sign * moved.mean().item() > 1e-4


def test_every_pair_is_used_once_per_epoch_and_the_base_gets_no_update(monkeypatch):
    policy = _small_policy()
    policy.freeze_base()
    base = [p.clone() for p in policy.base_denoiser.parameters()]
    batch = _rollout(policy, 10, 1.0)
    seen = []
    original = policy.pair_info

    def spy(info, rows, step):
        seen.extend(zip(rows.tolist(), step.tolist()))
        return original(info, rows, step)

    monkeypatch.setattr(policy, "pair_info", spy)
    DPPO(DPPOConfig(epochs=2, minibatch_size=7, target_kl=0.0), policy, ValueCritic(2, (16,))).update(batch, 0.0)
    assert sorted(seen) == sorted([(row, step) for row in range(10) for step in range(3)] * 2)
    assert all(torch.equal(a, b) for a, b in zip(base, policy.base_denoiser.parameters()))


def test_dppo_refuses_other_policy_kinds_with_one_line(tmp_path):
    with pytest.raises(ConfigError) as error:
        build_loop(_experiment(tmp_path, {"name": "dppo"}, {"name": "flow", "hidden": [16]}))
    message = str(error.value)
    assert "algo.name=dppo needs policy.name=diffusion" in message and "\n" not in message


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"ft_steps": 7}, "ft_steps (K') must be in [1, denoising_steps=6]"),
        ({"ddim_steps": 9}, "ddim_steps must be in [1, denoising_steps=6] (the scheduler's training steps)"),
        ({"min_logprob_std": 0.0}, "min_logprob_std must be > 0"),
    ],
)
def test_bad_diffusion_settings_are_refused_at_config_load(tmp_path, policy, message):
    with pytest.raises(ConfigError) as error:
        _experiment(tmp_path, {"name": "dppo"}, policy)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_dppo_trains_checkpoints_and_resumes_with_the_frozen_base(tmp_path):
    config = _experiment(tmp_path, {"name": "dppo", "minibatch_size": 64, "epochs": 2}, {"ft_steps": 6}, 128)
    first = train(config, stop_at_iteration=1)
    state = load_checkpoint(first.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    assert bool(state["base_frozen"])
    assert not torch.equal(state["base_denoiser.net.layers.0.weight"], state["denoiser.net.layers.0.weight"])
    resumed = train(config, resume_dir=first.run_dir)
    assert resumed.iterations == 2 and resumed.env_steps == 128
    final = load_checkpoint(first.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    assert torch.equal(final["base_denoiser.net.layers.0.weight"], state["base_denoiser.net.layers.0.weight"])


def test_a_run_from_scratch_must_fine_tune_every_denoising_step(tmp_path):
    with pytest.raises(ConfigError) as error:  # K' = 3 < K = 6 without init_from: 3 steps would stay random
        build_loop(_experiment(tmp_path, {"name": "dppo"}), initialize=True)
    assert "start from a pretrained policy (init_from=RUN_DIR)" in str(error.value)


def test_dppo_refuses_an_asymmetric_clip(tmp_path):
    algo = {"name": "dppo", "ratio": {"name": "clip_asymmetric", "clip_low": 0.01, "clip_high": 0.02}}
    with pytest.raises(ConfigError, match="DPPO's clip range follows the denoising step"):
        build_loop(_experiment(tmp_path, algo))


@pytest.mark.parametrize("algo", [{"name": "ppo", "epochs": 1, "minibatch_size": 32}, {"name": "trpo"}])
def test_ppo_and_trpo_update_a_diffusion_policy(tmp_path, algo):
    loop = build_loop(_experiment(tmp_path, algo))
    assert bool(loop.policy.base_frozen)  # the loop froze the first K - K' steps' network
    metrics = loop.iteration(0.0)
    assert math.isfinite(metrics["batch_approx_kl"] if "batch_approx_kl" in metrics else metrics["kl"])


def test_chunk_actions_stay_within_each_episode():
    action = torch.arange(7.0).unsqueeze(-1)
    episode = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    expected = [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4], [5, 6, 6], [6, 6, 6]]
    assert chunk_actions(action, episode, 3).tolist() == expected
    assert chunk_actions(action, episode, 1) is action
