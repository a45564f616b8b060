"""The command curriculum (``task.command_curriculum``): the velocity command's ranges start at a share of their final
size and widen when ended episodes tracked well; its state resumes; bad settings are one line."""

from __future__ import annotations

import pytest
import torch

from robopt.envs import make_env
from tests.robots.conftest import quadruped_sections

CURRICULUM = {"reward": "track_lin_vel_xy", "start": 0.5, "step": 0.25, "threshold": 0.6}


def quadruped(num_envs: int = 4, curriculum: dict | None = None, **task_changes):
    robot, task = quadruped_sections()
    task["command_curriculum"] = curriculum if curriculum is not None else CURRICULUM
    task.update(task_changes)
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1)


def test_ranges_widen_after_episodes_that_tracked() -> None:
    env = quadruped(4)
    task = env.task
    command, curriculum = task.command, task.command_curriculum
    # the shipped ranges are the final ones: x [-1, 1], y [-0.5, 0.5], yaw [-1, 1]; training starts at half of them
    assert command.ranges == {"lin_vel_x": (-0.5, 0.5), "lin_vel_y": (-0.25, 0.25), "ang_vel_z": (-0.5, 0.5)}
    assert (task.command.value[:, :2].abs() <= 0.5 + 1e-12).all()
    rows = torch.arange(2)
    steps = task.max_episode_steps  # 1000: a whole episode
    # a mean of 0.5 per step is under the 0.6 threshold: nothing moves, and the ended rows' sums restart
    curriculum.sums[:] = 0.5 * steps
    task.place_rows(rows, env.physics.state, True, torch.Generator().manual_seed(0))
    assert float(curriculum.scale) == 0.5 and curriculum.sums[:2].tolist() == [0.0, 0.0]
    # 0.7 per step: three quarters, then all of the final ranges, never more
    for expected in (0.75, 1.0, 1.0):
        curriculum.sums[:] = 0.7 * steps
        task.place_rows(rows, env.physics.state, True, torch.Generator().manual_seed(0))
        assert float(curriculum.scale) == expected
    assert command.ranges == {"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-0.5, 0.5), "ang_vel_z": (-1.0, 1.0)}
    # env.reset ends no episode: the scale stays
    curriculum.sums[:] = 0.0
    env.reset(seed=1)
    assert float(curriculum.scale) == 1.0
    _, _, _, _, info = env.step(torch.zeros(4, 12))
    assert float(info["log"]["command_scale"]) == 1.0
    assert (curriculum.sums > 0).all()  # the tracking term's value of that step


def test_the_curriculum_resumes_exactly() -> None:
    first, second = quadruped(3, episode_s=0.2), quadruped(3, episode_s=0.2)
    generator = torch.Generator().manual_seed(0)
    actions = [0.2 * torch.randn(3, 12, generator=generator) for _ in range(30)]
    first.reset(seed=2)
    for action in actions[:12]:
        first.step(action)
    first.task.command_curriculum.scale = torch.tensor(0.75, dtype=torch.float64)
    first.task.command_curriculum._apply()
    second.load_state_dict(first.state_dict())
    assert second.task.command.ranges == first.task.command.ranges
    for action in actions[12:]:
        out_first, out_second = first.step(action), second.step(action)
        for a, b in zip(out_first[:4], out_second[:4], strict=True):  # same kernels and shapes: bit equality
            assert torch.equal(a, b)
    torch.testing.assert_close(second.task.command_curriculum.sums, first.task.command_curriculum.sums, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("curriculum", "changes", "message"),
    [
        ({"reward": "track_speed"}, {}, "task.command_curriculum.reward: 'track_speed' is not a term of task.rewards"),
        ({"reward": "track_lin_vel_xy", "start": 0.0}, {}, "start: expected a number in (0, 1], got 0.0"),
        ({"reward": "track_lin_vel_xy", "threshold": 1.5}, {}, "threshold: expected a number in (0, 1], got 1.5"),
        (
            {"reward": "alive"},
            {"commands": {}, "observations": {"joint_pos": {}}, "rewards": {"alive": {"weight": 1.0}}},
            "task.command_curriculum needs a velocity command (task.commands.type: velocity)",
        ),
    ],
)
def test_bad_command_curriculum_is_one_line(curriculum: dict, changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        quadruped(2, curriculum, **changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)
