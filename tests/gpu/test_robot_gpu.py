"""A robot from its description on MuJoCo Warp on a CUDA device: the quadruped's task at 4096 envs (commands, terms,
context, resets, privileged terms all on the device), replayed from a CUDA graph, and its first steps against the
CPU backend. Marked ``gpu`` and skipped without CUDA; prepared without a GPU (the same checks run on warp's CPU
device in tests/robots/test_robot_warp.py). No timing asserts: benchmarks/robot_throughput.py measures speed.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
pytest.importorskip("mujoco_warp")

from robopt.envs import make_env  # noqa: E402
from tests.robots.conftest import quadruped_sections  # noqa: E402


def test_quadruped_task_at_4096_envs_on_cuda() -> None:
    robot, task = quadruped_sections()
    task["critic"] = {"feet_contact": {}, "feet_height": {}}
    env = make_env(
        "robot",
        4096,
        backend="auto",
        device="cuda",
        robot=robot,
        task=task,
        seed=0,
        graph=True,
        randomization={"motor_strength": [0.8, 1.2], "push_force": [0, 30], "push_interval": [50, 100]},
    )
    assert type(env.physics).__name__ == "WarpBackend"
    obs = env.reset(seed=0)
    assert obs.device.type == "cuda" and obs.shape == (4096, 48)
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(0.3 * torch.randn(4096, 12, device="cuda"))
    assert reward.device.type == terminated.device.type == info["final_obs"].device.type == "cuda"
    assert torch.isfinite(obs).all() and not info["unstable"].any()
    assert env.privileged_obs().device.type == "cuda" and all(v.device.type == "cuda" for v in info["log"].values())
    state = env.state_dict()  # a checkpoint of a CUDA env holds CPU tensors
    env.load_state_dict(state)


def test_quadruped_first_steps_match_the_cpu_backend() -> None:
    robot, task = quadruped_sections()
    for entry in task["observations"].values():
        entry.pop("noise", None)
    task["reset"] = {}
    gpu = make_env("robot", 4, backend="mujoco_warp", device="cuda", robot=robot, task=task, seed=0)
    cpu = make_env("robot", 4, backend="mujoco", robot=robot, task=task, seed=0)
    torch.testing.assert_close(gpu.reset(seed=1).cpu(), cpu.reset(seed=1), atol=2e-3, rtol=2e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        action = 0.3 * torch.randn(4, 12, generator=generator)
        torch.testing.assert_close(gpu.step(action.cuda())[0].cpu(), cpu.step(action)[0], atol=2e-3, rtol=2e-3)
