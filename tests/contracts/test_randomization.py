"""Domain randomization knobs of the native env (``robopt.envs.randomization``), each by an effect checked by hand:
inertia follows mass, motor strength, actuator delay, action and observation noise, pushes, privileged obs,
reproducible draws, exact resume with every knob on, config errors, and the same on MuJoCo Warp's CPU device.

InvertedPendulum facts used below (gymnasium's MJCF): cart 10.47 kg on an x slider, pole 5.02 kg on a hinge,
motor gear 100 (force = 100 * gain * ctrl, ctrl in [-3, 3]), joint damping 1, RK4 with dt = 0.02 and frame_skip 2
(env dt = 0.04 s); reset_noise_scale=0 starts the pole (nearly) upright at rest.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from robopt.checkpoint import load_checkpoint, save_checkpoint
from robopt.envs import make_env
from robopt.envs.native_env import Randomization as ReExported
from robopt.envs.randomization import Randomization

EVERY_KNOB = {
    "body_mass": [0.7, 1.3],
    "geom_friction": [0.6, 1.4],
    "dof_damping": [0.5, 1.5],
    "motor_strength": [0.6, 1.2],
    "action_delay": [0, 2],
    "action_noise": 0.1,
    "obs_noise": 0.05,
    "push_force": [20.0, 60.0],
    "push_interval": [2, 6],
    "push_duration": 2,
}


def _pendulum(num_envs: int = 2, **randomization):
    options = {"backend": "mujoco", "seed": 0, "reset_noise_scale": 0.0, "randomization": randomization}
    return make_env("mujoco/InvertedPendulum", num_envs, **options)


def _clean_obs(env) -> torch.Tensor:
    return env.task.observe(env.physics.state()).float()


def _x_momentum(env, row: int) -> float:
    """Linear x momentum of the cart + pole subtree of one CPU row (MuJoCo's subtree_linvel * subtree mass)."""
    model, live = env.physics._models[row], env.physics._datas[row]
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = live.qpos, live.qvel
    mujoco.mj_forward(model, data)
    mujoco.mj_subtreeVel(model, data)
    return float(data.subtree_linvel[1, 0] * model.body_subtreemass[1])


def test_inertia_is_scaled_with_mass() -> None:
    env = make_env("mujoco/HalfCheetah", 3, backend="mujoco", seed=0, randomization={"body_mass": [0.5, 1.5]})
    nominal = env.physics.nominal_params()
    for row in range(3):
        model = env.physics._models[row]
        mass_scale = torch.tensor(model.body_mass[1:]) / nominal["body_mass"][1:]  # [Bd - 1]
        inertia_scale = torch.tensor(model.body_inertia[1:]) / nominal["body_inertia"][1:]  # [Bd - 1, 3]
        torch.testing.assert_close(inertia_scale, mass_scale[:, None].expand(-1, 3), rtol=1e-12, atol=0)
        assert mass_scale.min() >= 0.5 and mass_scale.max() <= 1.5 and mass_scale.std() > 0.05
    torch.testing.assert_close(
        env.privileged_obs()[:, :7].double(),
        env.physics.state()["body_mass"][:, 1:] / nominal["body_mass"][1:],
        rtol=1e-6,
        atol=0,
    )


def test_motor_strength_halves_the_force_and_acceleration_from_rest() -> None:
    # Row 0 pushed with action 1, row 1 with 0 (the nearly upright pole's own fall). At half strength the actuator
    # force is 100 * 0.5 * 1 = 50 N instead of 100 N, and the velocity the push adds in one step halves.
    full, half = _pendulum(), _pendulum(motor_strength=[0.5, 0.5])
    action = torch.tensor([[1.0], [0.0]])
    for env in (full, half):
        env.step(action)
    assert full.physics._datas[0].qfrc_actuator[0] == 100.0 and half.physics._datas[0].qfrc_actuator[0] == 50.0
    full_v, half_v = full.physics.state()["qvel"][:, 0], half.physics.state()["qvel"][:, 0]
    added_full, added_half = full_v[0] - full_v[1], half_v[0] - half_v[1]  # measured 0.3317 and 0.1658 m/s
    assert added_full > 0.3
    torch.testing.assert_close(added_half / added_full, torch.tensor(0.5, dtype=torch.float64), rtol=1e-3, atol=0)
    assert half.privileged_dim == 1 and half.privileged_obs().tolist() == [[0.5], [0.5]]
    alias = make_env("mujoco/Hopper", 2, backend="mujoco", seed=3, randomization={"motor_strength": [0.5, 1.5]})
    gain = make_env("mujoco/Hopper", 2, backend="mujoco", seed=3, randomization={"actuator_gain": [0.5, 1.5]})
    assert torch.equal(alias.privileged_obs(), gain.privileged_obs())  # one knob, two names


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_action_delay_shifts_the_response_by_d_steps(delay: int) -> None:
    # A step action (3 from step 1 on) through a d-tick delay moves the cart exactly as the undelayed env moves
    # under d steps of zeros followed by the step: same qvel, bit for bit, at every step.
    delayed = _pendulum(action_delay=[delay, delay])
    reference = _pendulum()
    velocities = []
    for t in range(delay + 2):  # the pole falls past 0.2 rad (termination, reset) at the 3rd step of the push
        assert not delayed.step(torch.full((2, 1), 3.0))[2].any()
        reference.step(torch.full((2, 1), 3.0 if t >= delay else 0.0))
        assert torch.equal(delayed.physics.state()["qvel"], reference.physics.state()["qvel"]), f"step {t}"
        velocities.append(float(delayed.physics.state()["qvel"][0, 0]))
    assert all(abs(v) < 1e-3 for v in velocities[:delay]) and velocities[delay] > 0.9  # 3x push: ~0.99 m/s
    assert delayed.privileged_obs().tolist() == ([[float(delay)]] * 2 if delay else [[], []])


def test_action_delay_draws_every_integer_in_range() -> None:
    env = make_env("mujoco/Reacher", 64, backend="mujoco", seed=0, randomization={"action_delay": [1, 3]})
    delays = env.privileged_obs()[:, 0]
    assert set(delays.tolist()) == {1.0, 2.0, 3.0}


def test_action_noise_std_and_clipping() -> None:
    # HalfCheetah's ctrl range is [-1, 1]: action 0 plus N(0, 0.2^2) rarely clips (|n| > 5 sigma); action 1 at the
    # bound clips the upper half of the noise, so about half the applied values are exactly 1.
    env = make_env("mujoco/HalfCheetah", 16, backend="mujoco", seed=0, randomization={"action_noise": 0.2})
    zero_ctrl, bound_ctrl = [], []
    for _ in range(20):
        env.step(torch.zeros(16, 6))
        zero_ctrl.append(torch.tensor(np.stack([d.ctrl for d in env.physics._datas])))
        env.step(torch.ones(16, 6))
        bound_ctrl.append(torch.tensor(np.stack([d.ctrl for d in env.physics._datas])))
    zero_ctrl, bound_ctrl = torch.stack(zero_ctrl), torch.stack(bound_ctrl)  # [20, 16, 6] each, 1920 samples
    assert abs(zero_ctrl.std() / 0.2 - 1) < 0.05 and zero_ctrl.mean().abs() < 0.02  # 5% ~ 3 standard errors
    assert bound_ctrl.max() == 1.0 and 0.45 < (bound_ctrl == 1.0).float().mean() < 0.55


def test_obs_noise_std_and_final_obs_is_what_the_policy_sees() -> None:
    sigma = 0.05
    env = make_env("mujoco/Reacher", 8, backend="mujoco", seed=0, randomization={"obs_noise": sigma})
    noise = []
    for _ in range(50):  # Reacher truncates at 50: the last step ends every row
        obs, _, _, truncated, info = env.step(torch.zeros(8, 2))
        if not truncated.any():
            assert torch.equal(info["final_obs"], obs)  # the very sample the policy sees
            noise.append(obs - _clean_obs(env))
    assert truncated.all() and not torch.equal(info["final_obs"], obs)
    noise = torch.stack(noise)  # [49, 8, 10], 3920 samples
    assert abs(noise.std() / sigma - 1) < 0.05 and noise.mean().abs() < 0.003
    assert abs((obs - _clean_obs(env)).std() / sigma - 1) < 0.3  # the reset obs is noisy too (80 samples)


def test_pushes_move_a_resting_cart_only_while_active() -> None:
    # With joint damping 0 nothing external acts along x but the push, so the cart + pole x momentum is exactly
    # 0 until the push, grows by F_x * dt = F_x * 0.04 per pushed step, then stays put. push_interval 3: steps 1-3
    # idle, steps 4-5 pushed (duration 2), steps 6-8 idle (a fresh wait of 3), step 9 pushed again.
    env = _pendulum(push_force=[50.0, 50.0], push_interval=[3, 3], push_duration=2)
    params = env.model_params()
    params["dof_damping"][:] = 0.0
    env.set_model_params(params)
    env.reset(seed=0)
    expected = [0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]  # pushed steps so far, after each step
    for t, pushed_steps in enumerate(expected):
        next_pushed = env.privileged_obs()[:, -1]
        assert next_pushed.tolist() == [float(t in (3, 4))] * 2, f"step {t + 1}"
        env.step(torch.zeros(2, 1))
        force = env._randomizer.push_force  # [2, 6], the last push's wrench (zeros before the first)
        assert torch.allclose(force[:, :2].norm(dim=1), torch.tensor(50.0 if t >= 3 else 0.0, dtype=torch.float64))
        for row in range(2):
            momentum = _x_momentum(env, row)
            assert momentum == pytest.approx(float(force[row, 0]) * 0.04 * pushed_steps, abs=1e-6), f"step {t + 1}"
    assert env.physics._datas[0].xfrc_applied.max() == env.physics._datas[0].xfrc_applied.min() == 0.0
    assert env.privileged_obs()[:, -1].tolist() == [1.0, 1.0]  # step 9 is pushed
    env.step(torch.zeros(2, 1))
    assert abs(env.physics._datas[0].xfrc_applied[1, :2]).max() > 0


def test_privileged_obs_layout_and_final_privileged_obs() -> None:
    env = make_env("mujoco/Hopper", 3, backend="mujoco", seed=0, max_episode_steps=4, randomization=EVERY_KNOB)
    nominal = env.physics.nominal_params()
    # Hopper: Bd = 5 (world left out: 4), G = 5 (x 3 = 15), V = 6, U = 3, delay 1, push 1
    assert env.privileged_dim == 4 + 15 + 6 + 3 + 1 + 1 == 30
    privileged = env.privileged_obs()
    assert privileged.shape == (3, 30) and privileged.dtype == torch.float32
    for row in range(3):
        model = env.physics._models[row]
        expected = [
            torch.tensor(model.body_mass[1:]) / nominal["body_mass"][1:],
            (torch.tensor(model.geom_friction) / nominal["geom_friction"]).flatten(),
            torch.tensor(model.dof_damping[3:]) / nominal["dof_damping"][3:],  # root DoFs have damping 0
            torch.tensor(model.actuator_gainprm[:, 0]) / nominal["actuator_gain"],
        ]
        torch.testing.assert_close(privileged[row, :19].double(), torch.cat(expected[:2]), rtol=1e-6, atol=0)
        torch.testing.assert_close(privileged[row, 22:28].double(), torch.cat(expected[2:]), rtol=1e-6, atol=0)
    assert set(privileged[:, 28].tolist()) <= {0.0, 1.0, 2.0} and set(privileged[:, 29].tolist()) <= {0.0, 1.0}
    for _ in range(3):
        _, _, _, _, info = env.step(torch.zeros(3, 3))
        torch.testing.assert_close(info["final_privileged_obs"], env.privileged_obs(), rtol=0, atol=0)
    before = env.privileged_obs()
    _, _, _, truncated, info = env.step(torch.zeros(3, 3))  # the time limit: every row resets, new draws
    assert truncated.all() and torch.equal(info["final_privileged_obs"][:, :28], before[:, :28])
    assert not torch.equal(env.privileged_obs()[:, :28], before[:, :28])
    plain = make_env("mujoco/Hopper", 2, backend="mujoco", seed=0)
    assert plain.privileged_dim == 0 and plain.privileged_obs().shape == (2, 0)
    assert "final_privileged_obs" not in plain.step(torch.zeros(2, 3))[4]


def _rollout(env, steps: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    outputs = []
    for _ in range(steps):
        action = torch.rand(env.num_envs, env.action_dim, generator=generator) * 2 - 1
        obs, reward, terminated, truncated, info = env.step(action)
        outputs += [obs, reward, terminated, truncated, info["final_obs"], env.privileged_obs()]
    return outputs


def _until_mid_push(env) -> None:
    """Step until some row is inside a push that goes on (its force is only in the simulator's state)."""
    randomizer = env._randomizer
    for _ in range(20):
        if bool((randomizer.pushing & (randomizer.push_left > 0)).any()):
            return
        env.step(torch.zeros(env.num_envs, env.action_dim))
    raise AssertionError("no push in 20 steps")


def test_same_seed_same_draws() -> None:
    def run(seed: int) -> list[torch.Tensor]:
        env = make_env("mujoco/Hopper", 3, backend="mujoco", seed=seed, max_episode_steps=10, randomization=EVERY_KNOB)
        first = [env.reset(seed=seed), env.privileged_obs(), *_rollout(env, 25, seed=0)]
        return first + [env.reset(seed=seed), env.privileged_obs(), *_rollout(env, 25, seed=0)]  # restarts streams

    one, two, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    half = len(one) // 2
    assert all(torch.equal(a, b) for a, b in zip(one[:half], one[half:], strict=True))
    assert not torch.equal(one[1], other[1]) and not torch.equal(one[2], other[2])


def test_state_dict_mid_episode_with_every_knob_continues_bit_identically(tmp_path) -> None:
    kwargs = {"backend": "mujoco", "max_episode_steps": 15, "randomization": EVERY_KNOB}
    env = make_env("mujoco/HalfCheetah", 4, seed=1, **kwargs)
    _rollout(env, 22, seed=2)  # mid-episode, with a full delay buffer
    _until_mid_push(env)
    save_checkpoint(tmp_path / "env.pt", {"env": env.state_dict()})
    expected = _rollout(env, 30, seed=3)  # crosses the time limit: new scales, delays, pushes
    restored = make_env("mujoco/HalfCheetah", 4, seed=99, **kwargs)
    restored.load_state_dict(load_checkpoint(tmp_path / "env.pt")["env"])
    for index, (a, b) in enumerate(zip(expected, _rollout(restored, 30, seed=3), strict=True)):
        assert torch.equal(a, b), f"step {index // 6} output {index % 6}"
    other = make_env("mujoco/HalfCheetah", 4, seed=1, backend="mujoco", randomization={"action_delay": [0, 5]})
    with pytest.raises(ValueError, match="same randomization"):
        other.load_state_dict(env.state_dict())


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"body_mass": [1.2, 0.8]}, r"randomization body_mass=\[1.2, 0.8\]: need 0 < low <= high"),
        ({"motor_strength": [0.0, 1.0]}, r"motor_strength=\[0.0, 1.0\]: need 0 < low <= high"),
        ({"body_mass": 0.5}, r"body_mass=0.5: need \[low, high\]"),
        ({"action_delay": [0.5, 2]}, r"action_delay=\[0.5, 2\]: need integers 0 <= low <= high <= 1000"),
        ({"action_delay": [3, 1]}, "action_delay=.*need integers"),
        ({"action_delay": [0, 10**6]}, "action_delay=.*<= 1000"),
        ({"obs_noise": -0.1}, r"obs_noise=-0.1: need a standard deviation >= 0"),
        ({"action_noise": "big"}, "action_noise='big': need a standard deviation"),
        ({"push_force": [-1.0, 5.0]}, r"push_force=\[-1.0, 5.0\]: need 0 <= low <= high \(Newtons\)"),
        ({"push_force": [1.0, 5.0]}, "push_force needs push_interval"),
        ({"push_force": [1, 5], "push_interval": [5, 2]}, r"push_interval=\[5, 2\]: need integers 0 <= low <= high"),
        ({"push_force": [1, 5], "push_interval": [1, 2], "push_duration": 0}, "push_duration=0: need an integer >= 1"),
        ({"push_interval": [1, 2]}, "push_interval needs push_force"),
        ({"motor_strength": [1, 2], "actuator_gain": [1, 2]}, "another name for actuator_gain"),
        (
            {"push_force": [1, 5], "push_interval": [1, 2], "push_body": "nose"},
            "push_body='nose': unknown body; allowed: torso, bthigh, bshin, bfoot, fthigh, fshin, ffoot",
        ),
        ({"mass": [0.5, 1.5]}, "unknown randomization keys"),
    ],
)
def test_bad_config_is_one_line(config: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        make_env("mujoco/HalfCheetah", 1, backend="mujoco", randomization=config)
    assert "\n" not in str(error.value)


def test_defaults_are_off_and_re_exported() -> None:
    assert ReExported is Randomization and not Randomization().active
    config = Randomization.from_config({"motor_strength": [0.8, 1.2], "push_force": [0, 5], "push_interval": [1, 2]})
    assert config.actuator_gain == (0.8, 1.2) and config.push_duration == 1 and config.push_body is None
    # with every knob off the env steps as before: the existing parity tests pin it against Gymnasium
    plain = make_env("mujoco/Hopper", 2, backend="mujoco", seed=5)
    off = make_env("mujoco/Hopper", 2, backend="mujoco", seed=5, randomization={"obs_noise": 0, "action_delay": [0, 0]})
    assert all(torch.equal(a, b) for a, b in zip(_rollout(plain, 10, 0), _rollout(off, 10, 0), strict=True))


# MuJoCo Warp on warp's CPU device (compiles kernels on first use, cached; see test_native_env_warp.py)


@pytest.mark.xdist_group("warp")  # one xdist worker compiles and caches warp's kernels for all warp tests
def test_warp_every_knob_matches_cpu_and_resumes_exactly() -> None:
    pytest.importorskip("mujoco_warp")
    kwargs = {"max_episode_steps": 6, "randomization": EVERY_KNOB}
    warp_env = make_env("mujoco/HalfCheetah", 2, backend="mujoco_warp", device="cpu", seed=0, **kwargs)
    cpu_env = make_env("mujoco/HalfCheetah", 2, backend="mujoco", seed=0, **kwargs)
    # same seed, same draws (both generators on CPU); inertia follows mass in the batched warp model too
    torch.testing.assert_close(warp_env.privileged_obs(), cpu_env.privileged_obs(), rtol=0, atol=0)
    inertia = warp_env.physics._wp.to_torch(warp_env.physics._m.body_inertia).double()  # [2, Bd, 3]
    scale = warp_env.physics.state()["body_mass"].double()[:, 1:] / cpu_env.physics.nominal_params()["body_mass"][1:]
    torch.testing.assert_close(
        inertia[:, 1:] / cpu_env.physics.nominal_params()["body_inertia"][1:],
        scale[:, :, None].expand(-1, -1, 3),
        rtol=1e-6,
        atol=0,
    )
    warp_out, cpu_out = _rollout(warp_env, 8, seed=1), _rollout(cpu_env, 8, seed=1)  # pushes, delay, a reset
    for index, (a, b) in enumerate(zip(warp_out, cpu_out, strict=True)):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3, msg=f"step {index // 6} output {index % 6}")
    assert bool(torch.stack(warp_out[3::6]).any())
    _until_mid_push(warp_env)
    state = warp_env.state_dict()
    expected = _rollout(warp_env, 6, seed=2)
    restored = make_env("mujoco/HalfCheetah", 2, backend="mujoco_warp", device="cpu", seed=9, **kwargs)
    restored.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(expected, _rollout(restored, 6, seed=2), strict=True))


@pytest.mark.xdist_group("warp")  # one xdist worker compiles and caches warp's kernels for all warp tests
def test_warp_push_sets_xfrc_applied() -> None:
    pytest.importorskip("mujoco_warp")
    config = {"push_force": [40.0, 40.0], "push_interval": [1, 1], "push_duration": 1}
    env = make_env("mujoco/InvertedPendulum", 2, backend="mujoco_warp", device="cpu", seed=0, randomization=config)
    xfrc = env.physics._wp.to_torch(env.physics._d.xfrc_applied)  # [2, 3, 6]
    env.step(torch.zeros(2, 1))  # step 1 idle
    assert xfrc.abs().max() == 0
    env.step(torch.zeros(2, 1))  # step 2 pushed: 40 N horizontal on the cart (body 1)
    torch.testing.assert_close(xfrc[:, 1, :2].norm(dim=1), torch.full((2,), 40.0))
    assert xfrc[:, 1, 2:].abs().max() == 0 and xfrc[:, 2].abs().max() == 0
    env.step(torch.zeros(2, 1))  # step 3 idle again
    assert xfrc.abs().max() == 0
