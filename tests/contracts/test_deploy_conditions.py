"""env.kwargs.deploy_conditions: the deploy runtime's rate limit, actuator delay and sensor noise in training.

Checked against a plain Gymnasium env driven with the actions the deploy path would apply (same seed, so the
observations must be identical where no noise is added).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robopt.envs import make_env
from robopt.sim2real.safety import SafetyLayer


def _pair(**conditions):
    wrapped = make_env("Pendulum-v1", 1, backend="gymnasium", deploy_conditions=conditions)
    plain = make_env("Pendulum-v1", 1, backend="gymnasium")
    return wrapped, plain


def test_delay_applies_each_action_one_tick_later_and_zero_first() -> None:
    wrapped, plain = _pair(delay_ticks=1)
    assert torch.equal(wrapped.reset(seed=3), plain.reset(seed=3))
    actions = [1.5, -2.0, 0.5, 2.0]
    applied = [0.0, *actions[:-1]]
    for sent, expected in zip(actions, applied):
        obs, reward, *_ = wrapped.step(torch.tensor([[sent]]))
        plain_obs, plain_reward, *_ = plain.step(torch.tensor([[expected]]))
        assert torch.equal(obs, plain_obs) and torch.equal(reward, plain_reward)


def test_rate_limit_matches_the_deploy_safety_layer() -> None:
    wrapped, plain = _pair(max_action_delta=0.7)
    safety = SafetyLayer(lambda obs: obs, 3, [-2.0], [2.0], max_action_delta=0.7)  # its rate limit, alone
    wrapped.reset(seed=0), plain.reset(seed=0)
    for target in [2.0, 2.0, 2.0, -2.0, 5.0, 0.1]:  # 5.0 is past the bounds: clamped first, as deploy does
        expected = safety._rate_limit(np.clip(np.array([target]), -2.0, 2.0))
        safety.last_action = expected
        obs, *_ = wrapped.step(torch.tensor([[target]]))
        plain_obs, *_ = plain.step(torch.from_numpy(expected[None]).float())
        assert torch.equal(obs, plain_obs), target


def test_delay_range_is_drawn_per_episode() -> None:
    wrapped = make_env("Pendulum-v1", 1, backend="gymnasium", deploy_conditions={"delay_ticks": [1, 3]})
    inner = wrapped.envs[0]
    delays = set()
    for seed in range(30):
        wrapped.reset(seed=seed)
        delays.add(len(inner.pending))
    assert delays == {1, 2, 3}


def test_delay_and_rate_limit_restart_with_each_episode() -> None:
    wrapped, plain = _pair(delay_ticks=2, max_action_delta=1.0)
    wrapped.reset(seed=1)
    for _ in range(5):
        wrapped.step(torch.tensor([[2.0]]))
    inner = wrapped.envs[0]
    assert inner.last_sent.tolist() == [2.0] and [a.tolist() for a in inner.pending] == [[2.0], [2.0]]
    wrapped.reset(seed=1)
    assert inner.last_sent.tolist() == [0.0] and [a.tolist() for a in inner.pending] == [[0.0], [0.0]]


def test_sensor_noise_is_seeded_and_of_the_stated_size() -> None:
    noisy = make_env("Pendulum-v1", 1, backend="gymnasium", deploy_conditions={"obs_noise": 0.05})
    again = make_env("Pendulum-v1", 1, backend="gymnasium", deploy_conditions={"obs_noise": 0.05})
    plain = make_env("Pendulum-v1", 1, backend="gymnasium")
    differences = []
    for env in (noisy, again, plain):
        env.reset(seed=7)
    for _ in range(150):  # within the first 200-step episode (noise draws shift the next reset)
        action = torch.tensor([[0.3]])
        a, b, c = noisy.step(action)[0], again.step(action)[0], plain.step(action)[0]
        assert torch.equal(a, b)
        differences.append((a - c).numpy())
    spread = float(np.std(np.concatenate(differences)))
    assert 0.04 < spread < 0.06  # N(0, 0.05^2) per value, 450 draws


def test_checkpointed_state_continues_identically(tmp_path) -> None:
    conditions = {"delay_ticks": 2, "max_action_delta": 0.5, "obs_noise": 0.01}
    first = make_env("Pendulum-v1", 2, backend="gymnasium", deploy_conditions=conditions)
    first.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(7):
        first.step(torch.rand(2, 1, generator=generator) * 4 - 2)
    path = tmp_path / "env.pt"  # as checkpoints are written and read (robopt.checkpoint: weights_only=True)
    torch.save(first.state_dict(), path)
    state = torch.load(path, weights_only=True)
    second = make_env("Pendulum-v1", 2, backend="gymnasium", deploy_conditions=conditions)
    second.reset(seed=99)
    second.load_state_dict(state)
    for _ in range(5):
        action = torch.rand(2, 1, generator=generator) * 4 - 2
        assert torch.equal(first.step(action)[0], second.step(action)[0])


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"delay": 1}, "deploy_conditions: unknown delay; allowed: delay_ticks, max_action_delta, obs_noise"),
        ({"delay_ticks": -1}, "deploy_conditions.delay_ticks must be an integer in \\[0, 1000\\] or \\[low, high\\]"),
        ({"delay_ticks": [2, 1]}, "with low <= high, got \\[2, 1\\]"),
        ({"delay_ticks": 1.5}, "deploy_conditions.delay_ticks must be an integer"),
        ({"max_action_delta": 0}, "deploy_conditions.max_action_delta must be a number > 0"),
        ({"max_action_delta": [1.0, 2.0]}, "deploy_conditions.max_action_delta must be a number > 0 or 1 numbers"),
        ({"obs_noise": -0.1}, "deploy_conditions.obs_noise must be a number >= 0"),
        (3, "deploy_conditions must be a mapping of delay_ticks, max_action_delta, obs_noise, got 3"),
    ],
)
def test_bad_conditions_are_one_line(conditions, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_env("Pendulum-v1", 1, backend="gymnasium", deploy_conditions=conditions)


def test_a_run_under_deploy_conditions_checkpoints_resumes_and_evaluates_under_them(tmp_path) -> None:
    from robopt.checkpoint import load_checkpoint
    from robopt.config import build_dataclass
    from robopt.experiment import ExperimentConfig
    from robopt.runner import train

    def config(total_steps: int) -> ExperimentConfig:
        return build_dataclass(
            ExperimentConfig,
            {
                "name": "dc",
                "seed": 0,
                "total_steps": total_steps,
                "env": {
                    "id": "Pendulum-v1",
                    "num_envs": 1,
                    "kwargs": {"deploy_conditions": {"delay_ticks": 1, "max_action_delta": 1.0, "obs_noise": 0.01}},
                },
                "policy": {"name": "gaussian", "squash": True, "hidden": [16, 16], "normalize_obs": False},
                "algo": {
                    "name": "sac",
                    "critic_hidden": [16, 16],
                    "loop": {"learning_starts": 100, "batch_size": 32, "iteration_steps": 100},
                },
                "log": {"run_root": str(tmp_path), "progress": False, "eval_episodes": 2, "checkpoint_every": 1},
            },
        )

    first = train(config(200))
    state = load_checkpoint(first.run_dir / "checkpoints" / "last.pt")  # weights_only: the wrapper state loads
    rows = state["loop"]["env"]["rows"]
    assert rows[0]["deploy_conditions"][0]["pending"] == [rows[0]["deploy_conditions"][0]["last_sent"]]
    resumed = train(config(300), resume_dir=first.run_dir)
    assert resumed.env_steps == 300 and (resumed.run_dir / "eval.json").exists()
