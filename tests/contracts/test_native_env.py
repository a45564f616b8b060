"""VecEnv contract of the native ``mujoco`` backend: dtypes, auto-reset, final_obs, per-env model
parameters, seeding, unstable rows and bad input."""

from __future__ import annotations

import logging

import pytest
import torch

from robopt.core.protocols import VecEnv
from robopt.envs import make_env


def _zero_action(env) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.action_dim)


def test_contract_shapes_and_dtypes() -> None:
    env = make_env("mujoco/HalfCheetah", 3, backend="mujoco", seed=0)
    assert isinstance(env, VecEnv)
    obs = env.reset(seed=0)
    assert obs.shape == (3, env.obs_dim) == (3, 17) and obs.dtype == torch.float32
    assert env.action_low.shape == env.action_high.shape == (env.action_dim,) == (6,)
    obs, reward, terminated, truncated, info = env.step(_zero_action(env))
    assert reward.shape == (3,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == info["unstable"].dtype == torch.bool
    assert info["final_obs"].shape == (3, 17) and info["episode_length"].dtype == torch.int64
    env.close()


def test_auto_reset_and_final_obs_on_truncation() -> None:
    # Reacher truncates at 50 steps; the returned obs is the new episode's, final_obs the last one.
    env = make_env("mujoco/Reacher", 2, backend="mujoco", seed=0)
    env.reset(seed=0)
    for _ in range(49):
        obs, _, _, truncated, info = env.step(_zero_action(env))
        assert not truncated.any()
        torch.testing.assert_close(info["final_obs"], obs)
    obs, reward, terminated, truncated, info = env.step(_zero_action(env))
    assert truncated.all() and not terminated.any()
    assert (info["episode_length"] == 50).all()
    assert not torch.equal(info["final_obs"], obs)
    # the new episode starts from the reset distribution: qvel of the arm ~ U(-0.005, 0.005)
    assert obs[:, 6:8].abs().max() <= 0.005
    state = env.physics.state()
    torch.testing.assert_close(obs[:, 8:10], (state["xpos"][:, 3] - state["xpos"][:, 4])[:, :2].float())


def test_termination_resets_only_that_row() -> None:
    env = make_env("mujoco/InvertedPendulum", 2, backend="mujoco", seed=0)
    env.reset(seed=0)
    push = torch.tensor([[3.0], [0.0]])  # row 0 pushed hard: the pole falls past 0.2 rad
    for _ in range(200):
        obs, _, terminated, _, info = env.step(push)
        if terminated[0]:
            break
    assert terminated[0] and not terminated[1]
    assert info["final_obs"][0, 1].abs() > 0.2 and obs[0, 1].abs() <= 0.01  # reset noise is U(-0.01, 0.01)
    assert info["episode_length"][0] > 0 and info["episode_length"][1] == 0


def test_heavier_body_falls_faster() -> None:
    # HalfCheetah starts slightly above the ground and settles onto its legs with zero action. Row 1's bodies
    # are 10x heavier while joint stiffness and actuators stay the same, so its torso (rootz, qpos[1]) drops
    # faster: measured 0.33 m vs 0.12 m after 5 steps.
    env = make_env("mujoco/HalfCheetah", 2, backend="mujoco", seed=0, reset_noise_scale=0.0)
    mass = env.model_params()["body_mass"]  # [2, Bd]
    mass[1] *= 10.0
    env.set_model_params({"body_mass": mass})
    env.reset(seed=0)
    torch.testing.assert_close(env.physics.state()["body_mass"], mass)
    z0 = env.physics.state()["qpos"][:, 1].clone()
    for _ in range(5):
        env.step(_zero_action(env))
    drop = z0 - env.physics.state()["qpos"][:, 1]
    assert drop[1] > 2 * drop[0] > 0


def test_heavier_cart_accelerates_less() -> None:
    # Same force on a 10x heavier cart gives ~10x less velocity change: dv = F dt / m.
    env = make_env("mujoco/InvertedPendulum", 2, backend="mujoco", seed=0, reset_noise_scale=0.0)
    mass = env.model_params()["body_mass"]
    mass[1] *= 10.0
    env.set_model_params({"body_mass": mass[1:]}, env_ids=torch.tensor([1]))
    env.reset(seed=0)
    env.step(torch.full((2, 1), 1.0))
    cart_velocity = env.physics.state()["qvel"][:, 0]
    assert cart_velocity[0] > 3 * cart_velocity[1] > 0


def test_randomization_draws_per_env_params() -> None:
    env = make_env("mujoco/HalfCheetah", 4, backend="mujoco", seed=0, randomization={"body_mass": [0.5, 1.5]})
    env.reset(seed=0)
    masses = env.physics.state()["body_mass"][:, 1:]  # world body has mass 0
    nominal = env.model_params()["body_mass"][:, 1:]
    ratio = masses / nominal
    assert ((ratio >= 0.5) & (ratio <= 1.5)).all() and ratio.std() > 0.05
    assert not torch.equal(masses[0], masses[1])
    with pytest.raises(ValueError, match="unknown randomization keys"):
        make_env("mujoco/HalfCheetah", 1, backend="mujoco", randomization={"mass": [0.5, 1.5]})


def test_seeding_reproducible() -> None:
    def rollout(seed: int) -> torch.Tensor:
        env = make_env("mujoco/Hopper", 3, backend="mujoco", seed=seed)
        observations = [env.reset(seed=seed)]
        generator = torch.Generator().manual_seed(seed)
        for _ in range(60):  # long enough for some Hopper episodes to end and auto-reset
            action = torch.rand(3, env.action_dim, generator=generator) * 2 - 1
            observations.append(env.step(action)[0])
        return torch.stack(observations)

    torch.testing.assert_close(rollout(1), rollout(1), rtol=0, atol=0)
    assert not torch.equal(rollout(1), rollout(2))


def test_unstable_row_is_reset_and_reported(caplog) -> None:
    env = make_env("mujoco/HalfCheetah", 3, backend="mujoco", seed=0)
    env.reset(seed=0)
    previous = env.step(_zero_action(env))[0]
    data = env.physics._datas[1]
    data.qvel[:] = 1e12  # MuJoCo flags this as unstable and resets the row itself
    with caplog.at_level(logging.WARNING, logger="robopt.envs.native_env"):
        obs, reward, terminated, truncated, info = env.step(_zero_action(env))
    assert info["unstable"].tolist() == [False, True, False]
    assert terminated[1] and not truncated[1] and reward[1] == 0
    torch.testing.assert_close(info["final_obs"][1], previous[1])
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
    assert env.unstable_count == 1 and "unstable" in caplog.text
    assert info["episode_length"][1] == 2


@pytest.mark.parametrize(
    ("action", "error", "match"),
    [
        (torch.zeros(2, 5), ValueError, r"mujoco/HalfCheetah: action must have shape \[2, 6\]"),
        (torch.zeros(2, 6, dtype=torch.int64), TypeError, "floating-point"),
        (torch.full((2, 6), float("nan")), ValueError, "NaN"),
        ([[0.0] * 6] * 2, TypeError, "torch.Tensor"),
    ],
)
def test_bad_action(action, error, match) -> None:
    env = make_env("mujoco/HalfCheetah", 2, backend="mujoco")
    with pytest.raises(error, match=match):
        env.step(action)


def test_unknown_task_backend_and_option() -> None:
    with pytest.raises(ValueError, match="unknown native task 'mujoco/Nope'; allowed: mujoco/Ant"):
        make_env("mujoco/Nope", 1)
    with pytest.raises(ValueError, match="unknown env backend 'jax'"):
        make_env("mujoco/Ant", 1, backend="jax")
    with pytest.raises(TypeError, match="mujoco/Ant: bad task option"):
        make_env("mujoco/Ant", 1, backend="mujoco", not_an_option=3)
    with pytest.raises(ValueError, match="unknown model parameter 'mass'"):
        make_env("mujoco/Ant", 1, backend="mujoco").set_model_params({"mass": torch.ones(1, 14)})


def test_gain_friction_and_damping_params_take_effect() -> None:
    # InvertedPendulum, no reset noise, the same push on 4 rows: nominal; actuator gain 0 (the motor does
    # nothing, the cart stays put); heavy slide-joint damping (the cart moves less); friction changes nothing
    # here (no contacts), which pins that only the named parameter changed.
    env = make_env("mujoco/InvertedPendulum", 4, backend="mujoco", seed=0, reset_noise_scale=0.0)
    params = env.model_params()
    params["actuator_gain"][1] = 0.0
    params["dof_damping"][2, 0] = 100.0  # the cart's slide joint: damping force -100 * velocity
    params["geom_friction"][3] *= 0.1
    env.set_model_params(params)
    env.reset(seed=0)
    for _ in range(3):
        env.step(torch.full((4, 1), 1.0))
    cart_x = env.physics.state()["qpos"][:, 0]
    assert cart_x[1].abs() < 1e-3 * cart_x[0]  # motor off: only the pole's reaction moves the cart (3e-5 m)
    assert 0.0 < cart_x[2] < 0.8 * cart_x[0]  # measured 0.044 vs 0.059 m
    assert cart_x[3] == cart_x[0]
