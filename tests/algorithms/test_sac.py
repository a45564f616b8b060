"""SAC, TD3 and DDPG on the off-policy loop: exact resume with the replay buffer, prioritized and n-step replay,
bad input."""

from __future__ import annotations

import pytest
import torch

from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.experiment import ExperimentConfig
from robopt.runner import train


def sac_config(tmp_path, normalize_obs: bool = False, **algo) -> ExperimentConfig:
    loop = {"learning_starts": 200, "batch_size": 64, "buffer_size": 5000, "iteration_steps": 200,
            **algo.pop("loop", {})}  # fmt: skip
    return build_dataclass(
        ExperimentConfig,
        {
            "name": "sac_small",
            "seed": 1,
            "total_steps": 1000,
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "policy": {
                "name": "gaussian",
                "squash": True,
                "hidden": [32, 32],
                "activation": "relu",
                "normalize_obs": normalize_obs,
            },
            "algo": {"name": algo.pop("name", "sac"), "critic_hidden": [32, 32], "loop": loop, **algo},
            "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 2, "checkpoint_every": 1},
        },
    )


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_resume_with_the_replay_buffer_continues_exactly(tmp_path, algo):
    config = sac_config(tmp_path, name=algo)
    full = train(config)
    first = train(config, stop_at_iteration=2)
    checkpoint = load_checkpoint(first.run_dir / LAST_CHECKPOINT)["loop"]
    assert checkpoint["iteration"] == 2 and checkpoint["replay"]["storage"] is not None
    resumed = train(config, resume_dir=first.run_dir)
    assert resumed.env_steps == full.env_steps == 1000
    a = load_checkpoint(full.run_dir / LAST_CHECKPOINT)["loop"]
    b = load_checkpoint(resumed.run_dir / LAST_CHECKPOINT)["loop"]
    for key, value in a["policy"].items():
        torch.testing.assert_close(b["policy"][key], value, rtol=0, atol=0)
    for key, value in a["algorithm"]["critic"].items():
        torch.testing.assert_close(b["algorithm"]["critic"][key], value, rtol=0, atol=0)


def test_prioritized_n_step_sac_updates_priorities(tmp_path):
    config = sac_config(tmp_path, loop={"sampler": "prioritized", "n_step": 3})
    loop = build_loop(config, initialize=True)
    try:
        for _ in range(3):
            metrics = loop.iteration(0.5)
    finally:
        loop.env.close()
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    sampler = loop.replay.sampler
    leaves = sampler.priority(torch.arange(loop.replay.size))
    assert float(leaves.max()) > float(leaves.min())  # TD errors moved the priorities off the initial maximum
    assert sampler.beta > 0.4  # annealed towards 1


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"policy": {"name": "gaussian", "squash": False}}, "needs policy.name=gaussian with policy.squash=true"),
        ({"algo": {"name": "sac", "loop": {"buffer_size": 32, "batch_size": 64}}}, "smaller than loop.batch_size"),
        ({"algo": {"name": "sac", "loop": {"priority_alpha": 1.5}}}, "loop.priority_alpha must be in [0, 1]"),
        ({"algo": {"name": "sac", "loop": {"sampler": "rank"}}}, "'rank' is not allowed"),
        (
            {
                "env": {"id": "Pendulum-v1", "num_envs": 8},
                "algo": {"name": "td3", "loop": {"buffer_size": 64, "batch_size": 32, "train_freq": 10}},
            },
            "8 x 10 = 80 transitions per phase do not fit in algo.loop.buffer_size 64",
        ),
    ],
)
def test_bad_sac_input_is_one_line(tmp_path, override, message):
    base = {"env": {"id": "Pendulum-v1"}, "policy": {"name": "gaussian", "squash": True}, "algo": {"name": "sac"}}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_loop(build_dataclass(ExperimentConfig, {**base, **override}), initialize=True)


def test_ddpg_is_td3_with_one_critic_no_smoothing_and_no_delay(tmp_path):
    loop = build_loop(sac_config(tmp_path, name="ddpg"), initialize=True)
    try:
        algorithm = loop.algorithm
        assert len(algorithm.critic.nets) == 1 and algorithm.config.policy_delay == 1
        assert algorithm.config.target_noise == 0.0
        for _ in range(2):
            metrics = loop.iteration(0.0)
        assert "actor_loss" in metrics  # the actor moves at every update
        # phases of 2 env steps (N = 2), 100 per iteration; updates start in the phase that reaches the 200 warm-up
        # steps (the 100th of iteration 1), then one per phase: 1 + 100
        assert algorithm.updates == 101
    finally:
        loop.env.close()
    td3 = build_loop(sac_config(tmp_path, name="td3"), initialize=True)
    assert len(td3.algorithm.critic.nets) == 2 and td3.algorithm.config.policy_delay == 2
    td3.env.close()
    with pytest.raises(ConfigError, match="need policy.name=gaussian with policy.squash=true"):
        build_loop(
            build_dataclass(ExperimentConfig, {"env": {"id": "Pendulum-v1"}, "algo": {"name": "td3"}}), initialize=True
        )


def test_resume_with_a_buffer_of_another_size_is_one_line(tmp_path):
    config = sac_config(tmp_path)
    first = train(config, stop_at_iteration=1)
    changed = sac_config(tmp_path, loop={"buffer_size": 6000})
    with pytest.raises(ConfigError, match=r"cannot resume .*replay state has capacity_per_env=2500.*=3000"):
        train(changed, resume_dir=first.run_dir)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_the_loop_feeds_the_observation_normalizer(tmp_path, algo):
    """normalize_obs: every collected observation reaches the one normalizer that the actor, the critics and
    their targets read (TD3's target actor once had a copy of its own, frozen at the initial statistics)."""
    loop = build_loop(sac_config(tmp_path, normalize_obs=True, name=algo), initialize=True)
    try:
        normalizer = loop.policy.normalizer
        algorithm = loop.algorithm
        assert algorithm.critic.normalizer is normalizer and algorithm.target_critic.normalizer is normalizer
        assert getattr(algorithm, "target_policy", loop.policy).normalizer is normalizer and normalizer.enabled
        seen = [loop.obs.clone()]
        step = loop.env.step

        def recording_step(action):
            result = step(action)
            seen.append(result[0].clone())
            return result

        loop.env.step = recording_step
        loop.iteration(0.0)  # 200 env steps over 2 envs, all of them warm-up (random actions)
        assert float(normalizer.count) == 200.0
        loop.iteration(0.0)  # then 200 more, with updates
        assert float(normalizer.count) == 400.0
        observed = torch.cat(seen[:200]).double()  # what the loop acted on: [400, D]
        torch.testing.assert_close(normalizer.mean, observed.mean(0), rtol=0, atol=1e-9)
        torch.testing.assert_close(normalizer.var, observed.var(0, unbiased=False), rtol=1e-9, atol=1e-9)
    finally:
        loop.env.close()


def test_resuming_a_checkpoint_from_before_obs_normalization_is_refused(tmp_path):
    loop = build_loop(sac_config(tmp_path), initialize=True)
    try:
        state = loop.state_dict()
    finally:
        loop.env.close()
    del state["normalizes_obs"]  # what a checkpoint written before the loop normalized observations holds
    loop = build_loop(sac_config(tmp_path, normalize_obs=True), initialize=True)
    try:
        with pytest.raises(ConfigError, match="from before the off-policy loop normalized observations"):
            loop.load_state_dict(state)
    finally:
        loop.env.close()
    plain = build_loop(sac_config(tmp_path), initialize=True)  # without normalization an old checkpoint still loads
    try:
        plain.load_state_dict(state)
    finally:
        plain.env.close()
