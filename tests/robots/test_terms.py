"""Terms of robopt.envs.robot on hand-worked values (Signals.of: the quantities a term reads, nothing else).

Quaternions are (w, x, y, z). A rotation by theta about an axis u is (cos(theta/2), sin(theta/2) u).
"""

from __future__ import annotations

import math

import pytest
import torch

from robopt.envs.robot import observations, rewards, terminations
from robopt.envs.robot.commands import PoseCommand, VelocityCommand, parse_command
from robopt.envs.robot.library import REGISTRY
from robopt.envs.robot.signals import Signals, euler_quat, quat_angle, quat_rotate, quat_rotate_inverse, yaw_quat
from robopt.envs.robot.terms import parse_terms

F64 = torch.float64


def t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def pitch_quat(theta: float) -> torch.Tensor:
    return t(math.cos(theta / 2), 0.0, math.sin(theta / 2), 0.0)[None]  # [1, 4]


def test_quaternion_rotation_by_hand() -> None:
    # 90 degrees of yaw: the world x axis is the body's -y axis, and R(q) maps body x to world y
    quat = yaw_quat(t(math.pi / 2))  # [1, 4]
    torch.testing.assert_close(quat_rotate_inverse(quat, t(1.0, 0.0, 0.0)[None]), t(0.0, -1.0, 0.0)[None])
    torch.testing.assert_close(quat_rotate(quat, t(1.0, 0.0, 0.0)[None]), t(0.0, 1.0, 0.0)[None])
    # intrinsic z-y-x Euler angles: yaw alone equals yaw_quat
    torch.testing.assert_close(euler_quat(t(0.0), t(0.0), t(0.3)), yaw_quat(t(0.3)))
    # the angle between identity and a 0.1 rad yaw is 0.1; q and -q are the same rotation
    identity = t(1.0, 0.0, 0.0, 0.0)[None]
    torch.testing.assert_close(quat_angle(identity, yaw_quat(t(0.1))), t(0.1))
    torch.testing.assert_close(quat_angle(identity, -identity), t(0.0))


def test_projected_gravity_of_a_pitched_base() -> None:
    # pitch 30 degrees: R_y(th)^T (0, 0, -1) = (sin th, 0, -cos th) = (0.5, 0, -0.8660)
    signals = Signals.of(base_quat=pitch_quat(math.pi / 6), base_lin_vel=torch.zeros(1, 3, dtype=F64))
    torch.testing.assert_close(signals.projected_gravity, t(0.5, 0.0, -math.sqrt(3) / 2)[None])
    # flat_orientation = |g_xy|^2 = 0.25; upright = -g_z = 0.8660
    torch.testing.assert_close(rewards.flat_orientation(signals), t(0.25))
    torch.testing.assert_close(rewards.upright(signals), t(math.sqrt(3) / 2))


def test_fall_termination_at_the_angle() -> None:
    # fall(angle=1.0) ends when g_z > -cos(1.0) = -0.5403: 30 degrees (g_z = -0.866) stands, 60 (-0.5) falls
    gravity = torch.stack([t(0.5, 0.0, -math.sqrt(3) / 2), t(math.sqrt(3) / 2, 0.0, -0.5)])
    signals = Signals.of(projected_gravity=gravity)
    assert terminations.fall(signals, angle=1.0).tolist() == [False, True]


def test_velocity_tracking_kernels() -> None:
    # command (1.0, 0.5, 0.2); velocity (0.6, 0.5, *); error^2 = 0.4^2 = 0.16 -> exp(-0.16 / 0.5^2) = exp(-0.64)
    signals = Signals.of(
        command=t(1.0, 0.5, 0.2)[None], base_lin_vel=t(0.6, 0.5, 0.3)[None], base_ang_vel=t(0.1, -0.2, -0.1)[None]
    )
    torch.testing.assert_close(rewards.track_lin_vel_xy(signals, std=0.5), t(math.exp(-0.64)))
    # yaw error (0.2 - (-0.1))^2 = 0.09 -> exp(-0.09 / 0.25) = exp(-0.36)
    torch.testing.assert_close(rewards.track_ang_vel_z(signals, std=0.5), t(math.exp(-0.36)))
    torch.testing.assert_close(rewards.lin_vel_z(signals), t(0.09))  # 0.3^2
    torch.testing.assert_close(rewards.ang_vel_xy(signals), t(0.05))  # 0.1^2 + 0.2^2


def test_joint_terms() -> None:
    # range [-1, 1] with soft 0.9: soft limits +-0.9; q = 0.95 is 0.05 beyond, q = -1.0 is 0.1 beyond: 0.15
    joint_range = torch.tensor([[-1.0, 1.0], [-1.0, 1.0], [-math.inf, math.inf]], dtype=F64)  # the third unlimited
    signals = Signals.of(joint_pos=t(0.95, -1.0, 0.0)[None], joint_range=joint_range, default_pose=t(0.5, -0.5, 0.0))
    torch.testing.assert_close(rewards.joint_pos_limits(signals, soft=0.9), t(0.15))
    torch.testing.assert_close(rewards.joint_deviation(signals), t(0.95))  # 0.45 + 0.5 + 0
    torch.testing.assert_close(observations.joint_pos(signals), t(0.45, -0.5, 0.0)[None])
    # energy: |2 * 0.5| + |-1 * 3| = 4; torques: 4 + 1 = 5
    signals = Signals.of(joint_torque=t(2.0, -1.0)[None], joint_vel=t(0.5, 3.0)[None], step_dt=0.02)
    torch.testing.assert_close(rewards.energy(signals), t(4.0))
    torch.testing.assert_close(rewards.joint_torques(signals), t(5.0))


def test_joint_acc_keeps_the_velocities_of_the_step_before() -> None:
    # started at (0.3, 3.0); a step to (0.5, 3.0) at 0.02 s: ((0.5 - 0.3) / 0.02)^2 + 0 = 100
    acc = rewards.JointAcc(Signals.of(joint_vel=t(0.3, 3.0)[None]))
    acc.update(Signals.of(joint_vel=t(0.5, 3.0)[None], step_dt=0.02))
    torch.testing.assert_close(acc(Signals.of()), t(100.0))
    # the next step from (0.5, 3.0) to (0.5, 2.9): (0.1 / 0.02)^2 = 25; a reset row starts from its new velocity
    acc.update(Signals.of(joint_vel=t(0.5, 2.9)[None], step_dt=0.02))
    torch.testing.assert_close(acc(Signals.of()), t(25.0))
    acc.reset(torch.tensor([0]), Signals.of(joint_vel=t(-1.0, 0.0)[None]))
    acc.update(Signals.of(joint_vel=t(-1.0, 0.0)[None], step_dt=0.02))
    torch.testing.assert_close(acc(Signals.of()), t(0.0))


def test_action_rate_and_stand_still() -> None:
    # |(1, 0) - (0.5, 0.5)|^2 = 0.5
    signals = Signals.of(action=t(1.0, 0.0)[None], previous_action=t(0.5, 0.5)[None])
    torch.testing.assert_close(rewards.action_rate(signals), t(0.5))
    # stand_still counts |q - q0| only below the command threshold: row 0 (|c| = 0.05) 0.3, row 1 (|c| = 1) 0
    command = torch.tensor([[0.05, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    joint_pos = torch.tensor([[0.2, -0.1], [0.2, -0.1]], dtype=F64)
    signals = Signals.of(command=command, joint_pos=joint_pos, default_pose=t(0.0, 0.0))
    torch.testing.assert_close(rewards.stand_still(signals, threshold=0.1), t(0.3, 0.0))


def test_feet_air_time_and_slip() -> None:
    # two rows, two feet, 0.1 s steps; both feet stand at step 0 and are off the ground from step 1. Foot 0 lands
    # at step 6, foot 1 at step 3; air time counts from the last step a foot stood (legged_gym's): 0.6 s and 0.3 s.
    # With threshold 0.5: (0.3 - 0.5) = -0.2 at step 3 and (0.6 - 0.5) = 0.1 at step 6, only while moving (row 0).
    def feet(*contact) -> Signals:
        return Signals.of(feet_contact=torch.tensor([contact, contact]), step_dt=0.1)

    command = torch.tensor([[0.5, 0.0, 0.0], [0.05, 0.0, 0.0]], dtype=F64)
    air = rewards.FeetAirTime(
        Signals.of(feet_force=torch.zeros(2, 2, dtype=F64), feet_contact=torch.ones(2, 2, dtype=torch.bool))
    )
    seen = []
    for step in range(1, 8):
        air.update(feet(step >= 6, step >= 3))
        seen.append(air(Signals.of(command=command), threshold=0.5))
    torch.testing.assert_close(seen[2], t(-0.2, 0.0))  # step 3: foot 1 lands after 0.3 s
    torch.testing.assert_close(seen[5], t(0.1, 0.0))  # step 6: foot 0 after 0.6 s
    assert all(float(seen[i].abs().sum()) == 0.0 for i in (0, 1, 3, 4, 6))  # nothing lands at the other steps
    air.reset(torch.tensor([0]), feet(True, False))  # a reset row: nothing has just landed, foot 1 is in the air
    assert air.air_time[0].tolist() == [0.0, 0.0] and air.in_contact[0].tolist() == [True, False]
    # slip: feet on the ground only, |v_xy|^2: foot 0 (0.3, 0.4) -> 0.25, foot 1 in the air (ignored)
    signals = Signals.of(
        feet_vel=torch.tensor([[[0.3, 0.4, 1.0], [2.0, 0.0, 0.0]]], dtype=F64),
        feet_contact=torch.tensor([[True, False]]),
    )
    torch.testing.assert_close(rewards.feet_slip(signals), t(0.25))


def test_end_effector_terms() -> None:
    # target 0.1 m away along x with the same orientation yawed by 0.2 rad
    target = torch.cat([t(0.5, 0.0, 0.3)[None], yaw_quat(t(0.2))], dim=1)  # [1, 7]
    signals = Signals.of(command=target, ee_pos_base=t(0.4, 0.0, 0.3)[None], ee_quat_base=t(1.0, 0.0, 0.0, 0.0)[None])
    torch.testing.assert_close(rewards.ee_position_error(signals), t(0.1))
    torch.testing.assert_close(rewards.ee_orientation_error(signals), t(0.2))
    torch.testing.assert_close(rewards.ee_position_tanh(signals, std=0.1), t(1.0 - math.tanh(1.0)))
    # the error observation: position (0.1, 0, 0) and the rotation as axis * angle (0, 0, 0.2)
    torch.testing.assert_close(observations.ee_pose_error(signals), t(0.1, 0.0, 0.0, 0.0, 0.0, 0.2)[None])


def test_body_contact_and_termination_penalty() -> None:
    signals = Signals.of(joint_pos=torch.zeros(2, 3, dtype=F64), terminated=torch.tensor([True, False]))
    torch.testing.assert_close(rewards.termination(signals), t(1.0, 0.0))
    torch.testing.assert_close(rewards.alive(signals), t(1.0, 1.0))


def test_velocity_command_ranges_and_standing_share() -> None:
    command = VelocityCommand({"type": "velocity", "lin_vel_x": [-1.0, 1.0], "lin_vel_y": [0.0, 0.0],
                               "ang_vel_z": [0.5, 0.5], "standing": 0.25})  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    draw = command.sample(20000, generator)
    moving = draw[:, 2] != 0
    assert draw[:, 0].abs().max() <= 1.0 and (draw[moving, 2] == 0.5).all() and (draw[:, 1] == 0).all()
    # a quarter stand: the standing share's binomial std at n = 20000 is 0.003
    assert abs((~moving).double().mean().item() - 0.25) < 0.015


def test_pose_command_quaternions_are_unit_with_w_positive() -> None:
    command = PoseCommand({"type": "pose", "x": [0.3, 0.4], "yaw": [-1.0, 1.0], "pitch": [0.0, 0.5]})
    draw = command.sample(100, torch.Generator().manual_seed(1))
    assert draw.shape == (100, 7) and draw[:, 0].min() >= 0.3 and draw[:, 0].max() <= 0.4
    torch.testing.assert_close(draw[:, 3:].norm(dim=1), torch.ones(100, dtype=F64))
    assert (draw[:, 3] >= 0).all()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"type": "run"}, "task.commands.type: 'run' is not a command type; allowed: velocity, pose"),
        ({"type": "velocity", "lin_vel_x": [1.0, -1.0]}, "task.commands.lin_vel_x: expected [low, high]"),
        ({"type": "velocity", "heading": [0, 1]}, "task.commands.heading: unknown key of a velocity command"),
        ({"type": "velocity", "resample_s": [0, 1]}, "task.commands.resample_s: expected seconds > 0"),
        ({"type": "velocity", "standing": 2}, "task.commands.standing: expected a share in [0, 1]"),
    ],
)
def test_bad_commands_are_one_line(config, message) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_command(config)


def test_term_parsing_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"rewards.run_fast: unknown reward term 'run_fast'; allowed: action_rate"):
        parse_terms("reward", "rewards", {"run_fast": {"weight": 1.0}}, REGISTRY["reward"])
    with pytest.raises(ValueError, match=r"rewards.track_lin_vel_xy.weight: expected a finite number, got 'high'"):
        parse_terms("reward", "rewards", {"track_lin_vel_xy": {"weight": "high"}}, REGISTRY["reward"])
    with pytest.raises(ValueError, match=r"unknown parameter 'sigma' of reward term 'track_lin_vel_xy'; allowed: std"):
        parse_terms("reward", "rewards", {"track_lin_vel_xy": {"sigma": 1.0}}, REGISTRY["reward"])
    with pytest.raises(ValueError, match=r"terminations.base_too_low: termination term 'base_too_low' needs parameter"):
        parse_terms("termination", "terminations", {"base_too_low": {}}, REGISTRY["termination"])
    with pytest.raises(ValueError, match=r"rewards.mine.hook='no_such_module:fn': cannot import 'no_such_module'"):
        parse_terms("reward", "rewards", {"mine": {"hook": "no_such_module:fn"}}, REGISTRY["reward"])
    with pytest.raises(ValueError, match=r"rewards.mine.hook='math:no_fn': module 'math' has no function 'no_fn'"):
        parse_terms("reward", "rewards", {"mine": {"hook": "math:no_fn"}}, REGISTRY["reward"])


def test_a_hook_term_takes_its_parameters() -> None:
    (term,) = parse_terms(
        "reward",
        "rewards",
        {"mine": {"hook": "tests.robots.hooks:height_bonus", "weight": 2.0, "target": 0.3}},
        REGISTRY["reward"],
    )
    assert (
        term.weight == 2.0 and term.params == {"target": 0.3} and term.source == "hook tests.robots.hooks:height_bonus"
    )
    torch.testing.assert_close(term.fn(Signals.of(base_height=t(0.25)), **term.params), t(-0.05))


def test_a_declared_hook_brings_its_needs_and_ranges() -> None:
    hook = {"hook": "tests.robots.hooks:StepsSinceReset", "weight": 1.0}
    (entry,) = parse_terms("reward", "rewards", {"steps": {**hook, "after": 3.0}}, REGISTRY["reward"])
    assert entry.info.stateful and [need.name for need in entry.needs] == ["floating"]
    with pytest.raises(ValueError, match=r"rewards.steps.after: expected a finite number > 0, got -1"):
        parse_terms("reward", "rewards", {"steps": {**hook, "after": -1}}, REGISTRY["reward"])
    with pytest.raises(ValueError, match=r"is declared as a reward term; this section takes observation terms"):
        parse_terms("observation", "observations", {"steps": {"hook": hook["hook"]}}, REGISTRY["observation"])
    # an undeclared hook needs nothing and names its elements by number
    undeclared = {"mine": {"hook": "tests.robots.hooks:height_bonus"}}
    (bare,) = parse_terms("reward", "rewards", undeclared, REGISTRY["reward"])
    assert bare.needs == () and bare.info.element_names(None, 2) == ["0", "1"]
