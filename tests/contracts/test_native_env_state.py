"""Checkpointing a native env: ``state_dict`` / ``load_state_dict`` continue the very same episodes.

A fresh env restored from a mid-episode state must produce bit-identical next steps (observations, rewards,
episode ends, auto-resets and their reset noise, randomized parameters) to the env the state was taken from.
"""

from __future__ import annotations

import pytest
import torch

from robopt.checkpoint import load_checkpoint, save_checkpoint
from robopt.envs import make_env


def _actions(env, steps: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    low, high = env.action_low, env.action_high
    return [low + (high - low) * torch.rand(env.num_envs, env.action_dim, generator=generator) for _ in range(steps)]


def _run(env, actions) -> list[tuple]:
    return [env.step(action) for action in actions]


def _assert_same(first: list[tuple], second: list[tuple]) -> None:
    for t, (a, b) in enumerate(zip(first, second, strict=True)):
        for index in range(4):
            assert torch.equal(a[index], b[index]), f"step {t} output {index}"
        for key in ("final_obs", "episode_return", "episode_length"):
            assert torch.equal(a[4][key], b[4][key]), f"step {t} {key}"


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("Hopper", {"randomization": {"body_mass": [0.7, 1.3], "geom_friction": [0.5, 1.5]}}),
        ("HalfCheetah", {"max_episode_steps": 30}),
    ],
)
def test_state_dict_round_trip_gives_identical_next_steps(tmp_path, name, kwargs) -> None:
    # Hopper terminates under random actions (resets draw new masses); HalfCheetah truncates every 30 steps.
    env = make_env(f"mujoco/{name}", 4, backend="mujoco", seed=1, **kwargs)
    env.reset(seed=1)
    _run(env, _actions(env, 37, seed=2))  # mid-episode, after some resets
    save_checkpoint(tmp_path / "env.pt", {"env": env.state_dict()})  # through the real checkpoint format
    after = _actions(env, 60, seed=3)
    expected = _run(env, after)
    assert any(bool((out[2] | out[3]).any()) for out in expected), "the window must contain episode ends"
    restored = make_env(f"mujoco/{name}", 4, backend="mujoco", seed=99, **kwargs)  # other seed: state must win
    restored.load_state_dict(load_checkpoint(tmp_path / "env.pt")["env"])
    _assert_same(expected, _run(restored, after))
    for key, value in env.model_params().items():
        assert torch.equal(value, restored.model_params()[key])


def test_state_of_another_task_is_refused() -> None:
    cheetah = make_env("mujoco/HalfCheetah", 2, backend="mujoco", seed=0)
    hopper = make_env("mujoco/Hopper", 2, backend="mujoco", seed=0)
    with pytest.raises(ValueError, match="saved env state"):
        hopper.load_state_dict(cheetah.state_dict())


@pytest.mark.xdist_group("warp")  # one xdist worker compiles and caches warp's kernels for all warp tests
def test_warp_state_dict_round_trip() -> None:
    pytest.importorskip("mujoco_warp")
    env = make_env("mujoco/HalfCheetah", 2, backend="mujoco_warp", device="cpu", seed=0, max_episode_steps=8)
    env.reset(seed=0)
    _run(env, _actions(env, 5, seed=2))
    state = env.state_dict()
    after = _actions(env, 6, seed=3)
    expected = _run(env, after)
    restored = make_env("mujoco/HalfCheetah", 2, backend="mujoco_warp", device="cpu", seed=7, max_episode_steps=8)
    restored.load_state_dict(state)
    _assert_same(expected, _run(restored, after))
