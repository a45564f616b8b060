"""Task functions on hand-made state, with the arithmetic in comments (Gymnasium v5 definitions)."""

from __future__ import annotations

import math

import torch

from robopt.envs.native_env import load_model
from robopt.envs.tasks import Ant, HalfCheetah, Hopper, Humanoid, InvertedDoublePendulum, Pusher, Reacher


def _state(**fields) -> dict[str, torch.Tensor]:
    return {name: torch.as_tensor(value, dtype=torch.float64) for name, value in fields.items()}


def test_half_cheetah_reward() -> None:
    task = HalfCheetah(load_model(HalfCheetah))
    state = _state(qpos=[[0.05] + [0.0] * 8], qvel=[[0.0] * 9])
    action = torch.tensor([[1.0, -1.0, 0.0, 0.0, 0.0, 0.5]], dtype=torch.float64)
    reward, terminated = task.reward(state, action, torch.zeros(1, 1, dtype=torch.float64), dt=0.05)
    # x_velocity = (0.05 - 0) / 0.05 = 1; ctrl = 0.1 * (1 + 1 + 0.25) = 0.225; reward = 1 - 0.225 = 0.775
    torch.testing.assert_close(reward, torch.tensor([0.775], dtype=torch.float64))
    assert not terminated.any()
    assert task.observe(state).shape == (1, 17)  # rootx excluded: 8 qpos + 9 qvel


def test_hopper_health_ranges_are_open() -> None:
    task = Hopper(load_model(Hopper))
    qvel = torch.zeros(4, 6, dtype=torch.float64)
    qpos = torch.tensor(
        [
            [0.0, 1.25, 0.0, 0.0, 0.0, 0.0],  # healthy
            [0.0, 0.7, 0.0, 0.0, 0.0, 0.0],  # z == 0.7: not > 0.7
            [0.0, 1.25, 0.2, 0.0, 0.0, 0.0],  # angle == 0.2: not < 0.2
            [0.0, 1.25, 0.0, 100.0, 0.0, 0.0],  # state_vector[2:] element == 100: not < 100
        ],
        dtype=torch.float64,
    )
    state = {"qpos": qpos, "qvel": qvel}
    assert task.is_healthy(state).tolist() == [True, False, False, False]
    reward, terminated = task.reward(state, torch.zeros(4, 3), torch.zeros(4, 1), dt=0.008)
    # x does not move; reward = healthy_reward (1) on the healthy row only
    assert reward.tolist() == [1.0, 0.0, 0.0, 0.0] and terminated.tolist() == [False, True, True, True]
    # velocities are clipped to [-10, 10] in the observation
    state["qvel"][0, 0] = 25.0
    assert task.observe(state)[0, 5] == 10.0


def test_ant_contact_cost_and_inclusive_health() -> None:
    model = load_model(Ant)
    task = Ant(model)
    nbody = model.nbody  # 14
    qpos = torch.zeros(2, 15, dtype=torch.float64)
    qpos[:, 2] = torch.tensor([0.2, 1.01], dtype=torch.float64)  # z == 0.2 is healthy (inclusive), 1.01 > 1 not
    cfrc_ext = torch.full((2, nbody, 6), 3.0, dtype=torch.float64)  # clipped to 1 for the cost
    state = {"qpos": qpos, "qvel": torch.zeros(2, 14), "xpos": torch.zeros(2, nbody, 3), "cfrc_ext": cfrc_ext}
    reward, terminated = task.reward(state, torch.zeros(2, 8), torch.zeros(2, 2), dt=0.05)
    # contact cost = 5e-4 * (14 bodies * 6 components * 1^2) = 0.042; healthy row: 1 - 0.042 = 0.958
    torch.testing.assert_close(reward, torch.tensor([0.958, -0.042], dtype=torch.float64))
    assert terminated.tolist() == [False, True]
    obs = task.observe(state)
    assert obs.shape == (2, 13 + 14 + 13 * 6) and obs[:, 27:].max() == 1.0


def test_humanoid_mass_center_uses_per_env_masses() -> None:
    model = load_model(Humanoid)
    task = Humanoid(model)
    xipos = torch.zeros(1, model.nbody, 3, dtype=torch.float64)
    xipos[0, 1, 0] = 1.0  # only the torso (body 1) is at x = 1
    mass = torch.ones(1, model.nbody, dtype=torch.float64)
    mass[0, 1] = 3.0
    # mass center x = 3 * 1 / (3 + (nbody - 1) * 1) = 3 / 16 with nbody = 14
    center = task.tracked_position({"xipos": xipos, "body_mass": mass})
    torch.testing.assert_close(center, torch.tensor([[3.0 / (3 + model.nbody - 1), 0.0]], dtype=torch.float64))


def test_inverted_double_pendulum_reward() -> None:
    task = InvertedDoublePendulum(load_model(InvertedDoublePendulum))
    site_xpos = torch.tensor([[[0.1, 0.0, 1.5]], [[0.0, 0.0, 1.0]]], dtype=torch.float64)
    qvel = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    state = {"site_xpos": site_xpos, "qvel": qvel}
    reward, terminated = task.reward(state, torch.zeros(2, 1), torch.zeros(2, 0), dt=0.05)
    # row 0: 10 - (0.01 * 0.1^2 + (1.5 - 2)^2) - (1e-3 * 1 + 5e-3 * 4) = 10 - 0.2501 - 0.021 = 9.7289
    # row 1: y = 1 <= 1 terminates, no alive bonus: 0 - (0 + 1) - 0 = -1
    torch.testing.assert_close(reward, torch.tensor([9.7289, -1.0], dtype=torch.float64))
    assert terminated.tolist() == [False, True]


def test_reacher_and_pusher_reset_distributions() -> None:
    generator = torch.Generator().manual_seed(0)
    reacher = Reacher(load_model(Reacher))
    qpos, qvel = reacher.reset_state(500, generator)
    assert (qpos[:, -2:].norm(dim=1) < 0.2).all() and (qvel[:, -2:] == 0).all()
    assert (qpos[:, :2] - reacher.init_qpos[:2]).abs().max() <= 0.1 and qvel.abs().max() <= 0.005
    pusher = Pusher(load_model(Pusher))
    qpos, qvel = pusher.reset_state(500, generator)
    cylinder = qpos[:, -4:-2]
    assert (cylinder.norm(dim=1) > 0.17).all() and (qpos[:, -2:] == 0).all() and (qvel[:, -4:] == 0).all()
    assert cylinder[:, 0].min() >= -0.3 and cylinder[:, 0].max() <= 0.0 and cylinder[:, 1].abs().max() <= 0.2
    torch.testing.assert_close(qpos[:, :7], pusher.init_qpos[:7].expand(500, 7))


def test_reset_noise_scale_option() -> None:
    task = HalfCheetah(load_model(HalfCheetah), reset_noise_scale=0.0)
    qpos, qvel = task.reset_state(3, torch.Generator().manual_seed(0))
    assert torch.equal(qpos, task.init_qpos.expand(3, -1)) and not qvel.any()
    assert math.isclose(HalfCheetah(load_model(HalfCheetah)).reset_noise_scale, 0.1)
