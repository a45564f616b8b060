"""A robot from its description on ``mujoco_warp`` (warp's CPU device), against the CPU ``mujoco`` backend.

The builder's model (floor, affine PD actuators, velocimeter, gyro, frame and contact sensors) goes to MuJoCo Warp
unchanged. Warp computes in float32 with its own contact frames, so the two agree closely for the first steps
and drift apart as contacts change (test_native_env_warp.py measures the same for the Gymnasium twins): the
observation and reward of the first 5 steps must agree within 2e-3 (a few ulp of float32 times the gains), and a
longer run on warp must stay finite with the same feet touching the floor as on the CPU.

The first run compiles warp kernels for this model (about a minute; cached in WARP_CACHE_PATH, see conftest.py).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mujoco_warp")

from robopt.envs import make_env  # noqa: E402
from tests.robots.conftest import quadruped_sections  # noqa: E402

pytestmark = pytest.mark.xdist_group("warp")  # one worker compiles warp's kernels into the cache for the others


def _quiet_quadruped(backend: str, num_envs: int = 2, terrain: dict | None = None, **kwargs):
    robot, task = quadruped_sections()
    for entry in task["observations"].values():
        entry.pop("noise", None)
    task["reset"] = {}
    if terrain is not None:  # on a generated terrain, with its height scan after the shipped observations
        task["terrain"] = terrain
        task["observations"]["height_scan"] = {"points": [5, 3]}
    return make_env("robot", num_envs, backend=backend, device="cpu", robot=robot, task=task, seed=0, **kwargs)


def test_warp_matches_the_cpu_backend_on_the_first_steps() -> None:
    warp_env, cpu_env = _quiet_quadruped("mujoco_warp"), _quiet_quadruped("mujoco")
    torch.testing.assert_close(warp_env.reset(seed=1), cpu_env.reset(seed=1), atol=2e-3, rtol=2e-3)
    generator = torch.Generator().manual_seed(0)
    for step in range(5):
        action = 0.3 * torch.randn(2, 12, generator=generator)
        warp_out, cpu_out = warp_env.step(action), cpu_env.step(action)
        torch.testing.assert_close(warp_out[0], cpu_out[0], atol=2e-3, rtol=2e-3, msg=f"obs at step {step}")
        torch.testing.assert_close(warp_out[1], cpu_out[1], atol=2e-3, rtol=2e-3, msg=f"reward at step {step}")
    for name in ("reward/track_lin_vel_xy", "error/lin_vel_xy"):
        assert abs(float(warp_out[4]["log"][name]) - float(cpu_out[4]["log"][name])) < 2e-3


def test_warp_runs_the_task_with_its_sensors_and_contacts() -> None:
    env = _quiet_quadruped("mujoco_warp", num_envs=3, randomization={"motor_strength": [0.9, 1.1]})
    env.reset(seed=0)
    for _ in range(50):  # standing on the default pose for a second
        obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 12))
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all() and not terminated.any()
    from robopt.envs.robot.signals import Signals

    signals = Signals(env.physics.state(), env.task.robot, env.task.context)
    assert signals.feet_contact.all()  # four feet on the floor
    total = signals.feet_force.sum(1)  # carrying the robot's weight: 13 kg * 9.81 = 127.5 N
    torch.testing.assert_close(total, torch.full_like(total, 127.5), atol=6.0, rtol=0)


def test_graph_replay_equals_eager_stepping_for_a_robot() -> None:
    eager, graph = _quiet_quadruped("mujoco_warp"), _quiet_quadruped("mujoco_warp", graph=True)
    eager.reset(seed=2), graph.reset(seed=2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(10):
        action = 0.3 * torch.randn(2, 12, generator=generator)
        for a, b in zip(eager.step(action)[:4], graph.step(action)[:4], strict=True):
            assert torch.equal(a, b)  # the same kernels replayed: bit equality


def test_warp_stands_on_the_generated_terrain() -> None:
    # the terrain (a heightfield and boxes in one static body) goes to warp unchanged: the rows start on the same
    # tiles with the same height scan, and after 50 steps of standing the four feet of every row carry the robot's
    # weight, on rough ground (1-2 cm) and on the stairs' platforms alike
    terrain = {"types": {"rough": 0.5, "stairs_up": 0.5}, "levels": 2, "columns": 2, "tile": 4.0, "border": 1.0,
               "platform": 1.0, "rough_height": [0.01, 0.02]}  # fmt: skip
    warp_env, cpu_env = _quiet_quadruped("mujoco_warp", 4, terrain), _quiet_quadruped("mujoco", 4, terrain)
    torch.testing.assert_close(warp_env.reset(seed=1), cpu_env.reset(seed=1), atol=2e-3, rtol=2e-3)
    assert torch.equal(warp_env.task.terrain.level, cpu_env.task.terrain.level)
    for _ in range(50):
        obs, reward, terminated, _, _ = warp_env.step(torch.zeros(4, 12))
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all() and not terminated.any()
    from robopt.envs.robot.signals import Signals

    signals = Signals(warp_env.physics.state(), warp_env.task.robot, warp_env.task.context)
    total = signals.feet_force.sum(1)
    torch.testing.assert_close(total, torch.full_like(total, 127.5), atol=10.0, rtol=0)
