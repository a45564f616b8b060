"""OGPO: its advantage by hand, the success buffer, the clipped chain update on a known critic, exact resume with
action chunks, learning on MultiGoal from a poor cloned start, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robopt.algorithms.ogpo import OGPO, OGPOConfig
from robopt.algorithms.success_buffer import SuccessBuffer
from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass, config_to_dict
from robopt.core.q_losses import sampled_advantage
from robopt.experiment import ExperimentConfig
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig
from robopt.runner import train

# ------------------------------------------------------------------------------------------- by hand


def test_sampled_advantage_by_hand():
    q = torch.tensor([[[1.0, 2.0, 6.0]], [[2.0, 1.0, 6.0]]])  # [C=2, S=1, M=3]: centred [-2, -1, 3] and [-1, -2, 3]
    raw = sampled_advantage(q, "mean", "none")
    torch.testing.assert_close(raw, torch.tensor([[-1.5, -1.5, 3.0]]))
    conservative = sampled_advantage(q, "conservative", "none")  # signs agree: the one closest to 0
    torch.testing.assert_close(conservative, torch.tensor([[-1.0, -1.0, 3.0]]))
    disagree = torch.tensor([[[1.0, 3.0]], [[3.0, 1.0]]])  # the critics rank the two samples oppositely: no push
    torch.testing.assert_close(sampled_advantage(disagree, "conservative", "none"), torch.zeros(1, 2))
    per_state = sampled_advantage(q, "conservative", "state")
    std = torch.tensor([-1.0, -1.0, 3.0]).std(unbiased=False)
    torch.testing.assert_close(per_state, torch.tensor([[-1.0, -1.0, 3.0]]) / (std + 1e-6))
    two_states = torch.tensor([[[0.0, 2.0], [0.0, 20.0]]])  # [1, 2, 2]: the batch std keeps their scales apart
    torch.testing.assert_close(
        sampled_advantage(two_states, "mean", "state"), torch.tensor([[-1.0, 1.0]] * 2), atol=1e-5, rtol=0
    )
    batch = sampled_advantage(two_states, "mean", "batch")
    torch.testing.assert_close(batch, torch.tensor([[-1.0, 1.0], [-10.0, 10.0]]) / (50.5**0.5 + 1e-6))
    with pytest.raises(ValueError, match="how"):
        sampled_advantage(q, "max", "none")


class FakeEnv:
    num_envs, obs_dim, action_dim, device = 2, 3, 2, torch.device("cpu")
    action_low, action_high = -torch.ones(2), torch.ones(2)


def test_success_buffer_keeps_successful_episodes_only():
    buffer = SuccessBuffer(capacity=5, max_length=3, success_return=10.0, env=FakeEnv())
    no = torch.zeros(2, dtype=torch.bool)
    for step in range(2):  # row 0: return 12 after 2 steps (kept); row 1: return 5 (not kept)
        done = torch.tensor([step == 1, step == 1])
        info = {"episode_return": torch.tensor([12.0, 5.0])}
        buffer.observe(torch.full((2, 3), float(step)), torch.full((2, 2), float(step)), done if step else no, info)
    assert buffer.size == 2 and buffer.episodes == 1
    torch.testing.assert_close(buffer.obs[:2, 0], torch.tensor([0.0, 1.0]))
    for step in range(4):  # row 0: 4 steps, longer than max_length: not kept; row 1: is_success after 2 steps
        done = torch.tensor([step == 3, step == 1])
        info = {"episode_return": torch.tensor([50.0, 0.0]), "is_success": torch.tensor([True, step == 1])}
        buffer.observe(torch.full((2, 3), 10.0 + step), torch.zeros(2, 2), done, info)
    assert buffer.size == 4 and buffer.episodes == 2  # row 1's 2 steps joined; row 0's long episode dropped
    for _ in range(3):  # row 1 keeps succeeding: the ring overwrites the oldest pairs
        buffer.observe(
            torch.full((2, 3), 99.0),
            torch.zeros(2, 2),
            torch.tensor([False, True]),
            {"episode_return": torch.tensor([0.0, 11.0])},
        )
    assert buffer.size == 5 and buffer.episodes == 5
    state = buffer.state_dict()
    copy = SuccessBuffer(capacity=5, max_length=3, success_return=10.0, env=FakeEnv())
    copy.load_state_dict(state)
    torch.testing.assert_close(copy.obs, buffer.obs)
    assert (copy.size, copy.cursor, copy.episodes) == (buffer.size, buffer.cursor, buffer.episodes)
    obs, action = copy.sample(7, torch.Generator().manual_seed(0))
    assert obs.shape == (7, 3) and action.shape == (7, 2)


class QuadraticCritic(torch.nn.Module):
    """Q_c(s, a) = -|a - target|^2 for two identical critics, [C, B]."""

    def __init__(self, target: torch.Tensor) -> None:
        super().__init__()
        self.target = target

    def forward(self, obs, action):
        return -(action - self.target).square().sum(-1).expand(2, -1)


def test_the_clipped_chain_update_moves_samples_toward_higher_q():
    torch.manual_seed(0)
    config = DiffusionPolicyConfig(hidden=(32, 32), denoising_steps=5, ft_steps=5, ddim_steps=5)
    policy = DiffusionPolicy(3, 2, -torch.ones(2), torch.ones(2), config)
    ogpo = OGPO(OGPOConfig(samples=8, policy_batch=16, learning_rate=3e-3, policy_epochs=4), policy, FakeEnv())
    target = torch.tensor([0.6, -0.4])
    ogpo.critic = QuadraticCritic(target)
    obs = torch.randn(16, 3)

    def mean_q() -> float:
        torch.manual_seed(1)
        return float(ogpo.critic(obs.repeat(64, 1), policy.act(obs.repeat(64, 1))[0])[0].mean())

    before = mean_q()
    for _ in range(40):
        metrics = ogpo.policy_update(obs)
    after = mean_q()
    assert after > before + 0.1, (before, after)
    assert 0.0 < float(metrics["clip_fraction"]) < 1.0  # the per-step clip is active on later epochs
    assert float(metrics["advantage_nonzero"]) == 1.0  # two identical critics always agree


# ------------------------------------------------------------------------------------------- runs


def ogpo_config(tmp_path: Path, total_steps: int, seed: int = 0, init_from: str = "", **algo) -> ExperimentConfig:
    policy = {"name": "diffusion", "hidden": [32, 32], "denoising_steps": 6, "ft_steps": 6, "ddim_steps": 3}
    algo = {"name": "ogpo", "samples": 4, "policy_batch": 16, "success_coef": 0.1, "success_return": -5.0,
            "loop": {"batch_size": 32, "buffer_size": 10000, "learning_starts": 100, "iteration_steps": 200},
            **algo}  # fmt: skip
    return build_dataclass(
        ExperimentConfig,
        {
            "name": "ogpo",
            "seed": seed,
            "total_steps": total_steps,
            "init_from": init_from,
            "env": {"id": "robopt/MultiGoal", "num_envs": 2},
            "policy": policy,
            "algo": algo,
            "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 2, "checkpoint_every": 1},
        },
    )


def test_ogpo_resumes_exactly_with_action_chunks_and_its_success_buffer(tmp_path):
    raw = config_to_dict(ogpo_config(tmp_path, 800))
    raw["policy"]["horizon"] = 2  # each decision is two env steps
    config = build_dataclass(ExperimentConfig, raw)
    full = train(config)
    assert full.env_steps == 800  # 400 decisions of 2 env steps
    first = train(config, stop_at_iteration=2)
    resumed = train(config, resume_dir=first.run_dir)
    a = load_checkpoint(full.run_dir / LAST_CHECKPOINT)["loop"]
    b = load_checkpoint(resumed.run_dir / LAST_CHECKPOINT)["loop"]
    assert a["iteration"] == b["iteration"] == 4 and b["env_steps"] == 800
    for key, value in a["policy"].items():
        torch.testing.assert_close(b["policy"][key], value, rtol=0, atol=0)
    for part in ("critic", "success"):
        for key, value in a["algorithm"][part].items():
            torch.testing.assert_close(b["algorithm"][part][key], value, rtol=0, atol=0)
    assert a["algorithm"]["success"]["episodes"] > 0  # episodes of return >= -5 were kept


def test_ogpo_fine_tunes_a_poor_cloned_diffusion_policy_online(tmp_path, dataset_root):
    """A diffusion policy cloned from 75% expert and 25% random episodes returns -18.8, -18.6, -14.4 (seeds 0, 1,
    2; expert 9.7); 4000 online env steps of OGPO (1000 updates, the first 500 critic-only) bring it to 9.4, 9.7,
    9.7, and the same run with no policy update stays at -18.8."""
    policy = {"name": "diffusion", "hidden": [64, 64], "denoising_steps": 10, "ft_steps": 10, "ddim_steps": 5}
    log = {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 50}
    bc = train(
        build_dataclass(
            ExperimentConfig,
            {
                "name": "bc",
                "seed": 0,
                "env": {"id": "robopt/MultiGoal", "num_envs": 2},
                "policy": policy,
                "log": log,
                "algo": {
                    "name": "bc",
                    "dataset": "test/mixed-v0",
                    "dataset_root": str(dataset_root),
                    "epochs": 30,
                    "learning_rate": 3e-3,
                },
            },
        )
    )
    cloned = json.loads((bc.run_dir / "eval.json").read_text())["mean_return"]
    run = train(
        build_dataclass(
            ExperimentConfig,
            {
                "name": "ogpo",
                "seed": 0,
                "total_steps": 4000,
                "init_from": str(bc.run_dir),
                "policy": policy,
                "log": log,
                "env": {"id": "robopt/MultiGoal", "num_envs": 4},
                "algo": {
                    "name": "ogpo",
                    "samples": 8,
                    "policy_batch": 64,
                    "policy_starts": 500,
                    "loop": {"batch_size": 256, "buffer_size": 100000, "learning_starts": 0, "iteration_steps": 500},
                },
            },
        )
    )
    tuned = json.loads((run.run_dir / "eval.json").read_text())["mean_return"]
    assert cloned < 0.0 and tuned > 5.0, (cloned, tuned)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("policy", "algo", "message"),
    [
        ({"name": "gaussian"}, {}, "algo.name=ogpo needs policy.name=diffusion"),
        ({"name": "flow"}, {}, "algo.name=ogpo needs policy.name=diffusion"),
        ({}, {"samples": 1}, "samples must be >= 2"),
        ({}, {"policy_batch": 64}, "policy_batch 64 exceeds loop.batch_size 32"),
        ({}, {"success_coef": -1.0}, "success_coef must be finite and >= 0"),
        ({"ft_steps": 3}, {}, "policy.ft_steps=3 < policy.denoising_steps=6"),
    ],
)
def test_bad_ogpo_input_is_one_line(tmp_path, policy, algo, message):
    raw = config_to_dict(ogpo_config(tmp_path, 400))
    if policy.get("name") in ("gaussian", "flow"):
        raw["policy"] = {"name": policy["name"], "hidden": [32, 32]}
    else:
        raw["policy"].update(policy)
    with pytest.raises(ConfigError, match=message):
        raw["algo"].update(algo)
        build_loop(build_dataclass(ExperimentConfig, raw), initialize=True)
