"""The env of ``env.id: robot``: the VecEnv contract, robopt's PD actuators by hand, contexts (air time, history,
commands), rewards as the weighted sum of terms, privileged terms, randomization of servos, and exact resume."""

from __future__ import annotations

import mujoco
import pytest
import torch

from robopt.core.protocols import VecEnv
from robopt.envs import make_env
from robopt.envs.robot.signals import Signals
from tests.robots.conftest import quadruped_sections


def quadruped(num_envs: int = 4, task_changes: dict | None = None, **kwargs):
    robot, task = quadruped_sections()
    task.update(task_changes or {})
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1, **kwargs)


def quiet_task(**changes) -> dict:
    """The quadruped's task without observation noise (values that tests compare exactly)."""
    _, task = quadruped_sections()
    for entry in task["observations"].values():
        entry.pop("noise", None)
    task.update(changes)
    return task


def test_contract_shapes_bounds_and_dtypes() -> None:
    env = quadruped(3)
    assert isinstance(env, VecEnv)
    obs = env.reset(seed=0)
    # 3 + 3 + 3 + 3 (command) + 12 + 12 + 12 (last action)
    assert obs.shape == (3, 48) and obs.dtype == torch.float32 and env.action_dim == 12
    # calf: range [-2.818, -0.888], default -1.8, scale 0.25 -> actions [(-2.818 + 1.8) / 0.25, (-0.888 + 1.8) / 0.25]
    torch.testing.assert_close(env.action_low[2], torch.tensor(-4.072))
    torch.testing.assert_close(env.action_high[2], torch.tensor(3.648))
    assert env.dt == pytest.approx(0.02) and env.max_episode_steps == 1000  # 20 s at 50 Hz
    obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 12))
    assert reward.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool
    assert set(info["log"]) >= {"reward/track_lin_vel_xy", "error/lin_vel_xy", "terminated/fall"}
    env.close()


def test_truncation_and_termination_stay_apart() -> None:
    # 0.1 s episodes: 5 control steps, then truncated (never terminated) with final_obs the last observation
    env = quadruped(2, quiet_task(episode_s=0.1, terminations={}))
    env.reset(seed=0)
    for _ in range(4):
        _, _, terminated, truncated, _ = env.step(torch.zeros(2, 12))
        assert not (terminated | truncated).any()
    obs, _, terminated, truncated, info = env.step(torch.zeros(2, 12))
    assert truncated.all() and not terminated.any() and not torch.equal(obs, info["final_obs"])
    # a base that must stay above 1 m ends at the first step: terminated, not truncated
    env = quadruped(2, quiet_task(terminations={"base_too_low": {"height": 1.0}}))
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(torch.zeros(2, 12))
    assert terminated.all() and not truncated.any() and (info["episode_length"] == 1).all()


def test_pd_actuator_force_by_hand(arm_file) -> None:
    # kp = 20, kd = 0.5, default 0.3, scale 0.25: action 2 -> target 0.3 + 0.5 = 0.8. At q = 0.5, qdot = 1:
    # force = 20 (0.8 - 0.5) - 0.5 * 1 = 5.5 N m; an effort limit of 3 clamps it to 3.
    robot = {"mjcf": str(arm_file), "joints": {"shoulder": {"kp": 20.0, "kd": 0.5, "effort": 3.0}},
             "default_pose": {"shoulder": 0.3}, "action_scale": 0.25, "floor": {"type": "none"}}  # fmt: skip
    task = {"observations": {"joint_pos": {}}, "rewards": {"alive": {"weight": 1.0}}}
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=0)
    model = env.physics.mj_model
    assert model.nu == 1 and model.ngeom == 2  # an actuator added; no floor
    data = mujoco.MjData(model)
    data.qpos[0], data.qvel[0], data.ctrl[0] = 0.5, 1.0, 2.0
    mujoco.mj_forward(model, data)
    assert data.actuator_force[0] == pytest.approx(3.0)
    model.actuator_forcerange[0] = [-100.0, 100.0]
    mujoco.mj_forward(model, data)
    assert data.actuator_force[0] == pytest.approx(5.5)
    # ctrl range: joint range [-1.5, 1.5] as actions: (-1.5 - 0.3) / 0.25 = -7.2, (1.5 - 0.3) / 0.25 = 4.8
    torch.testing.assert_close(env.action_low, torch.tensor([-7.2]))
    torch.testing.assert_close(env.action_high, torch.tensor([4.8]))
    # held at action 2, the joint settles at its target 0.8 (no gravity; damping ratio 0.5 / (2 sqrt(20 * 0.26)) =
    # 0.11, so the swing decays as exp(-0.11 * 8.8 t): below 1e-4 of the 0.5 rad step after 10 s)
    for _ in range(500):
        obs, *_ = env.step(torch.tensor([[2.0]]))
    torch.testing.assert_close(obs, torch.tensor([[0.5]]), atol=1e-3, rtol=0)  # joint_pos: q - default


def test_joint_effort_action(arm_file) -> None:
    # torque = scale * action = 4 * 0.5 = 2 N m; the action range is +-effort / scale = +-2.5
    robot = {"mjcf": str(arm_file), "joints": {"shoulder": {"effort": 10.0}}, "action": "joint_effort",
             "action_scale": 4.0, "floor": {"type": "none"}}  # fmt: skip
    task = {"observations": {"joint_vel": {}}, "rewards": {"alive": {"weight": 1.0}}}
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=0)
    torch.testing.assert_close(env.action_high, torch.tensor([2.5]))
    env.reset(seed=0)
    obs, *_ = env.step(torch.tensor([[0.5]]))
    # from rest, qdot after 0.02 s of 2 N m on I = 0.25 + 0.01: 2 / 0.26 * 0.02 = 0.1538 rad/s
    torch.testing.assert_close(obs, torch.tensor([[2.0 / 0.26 * 0.02]]), atol=1e-4, rtol=0)


def test_reward_is_the_weighted_sum_of_terms_times_dt() -> None:
    task = quiet_task(rewards={"track_lin_vel_xy": {"weight": 1.5, "std": 0.5}, "action_rate": {"weight": -0.1}})
    env = quadruped(3, task)
    env.reset(seed=0)
    action = 0.5 * torch.ones(3, 12)
    _, reward, *_ = env.step(action)
    signals = Signals(env.physics.state(), env.task.robot, env.task.context)
    # the command the reward saw: the one drawn at reset, still in place (resample every 10 s)
    velocity = signals.base_lin_vel[:, :2]
    tracking = torch.exp(-(signals.command[:, :2] - velocity).square().sum(1) / 0.25)
    rate = (0.5 * torch.ones(3, 12)).square().sum(1)  # previous action 0 at an episode's first step: 12 * 0.25 = 3
    expected = 0.02 * (1.5 * tracking - 0.1 * rate)
    torch.testing.assert_close(reward, expected.float())


def test_air_time_counts_from_lift_off_to_touch_down() -> None:
    env = quadruped(1, quiet_task())
    env.reset(seed=0)
    task = env.task
    state = dict(env.physics.state())
    contact = task.robot.sensors["feet_contact"]
    # foot 0 in the air for 3 steps (force 0), then on the ground with 50 N (net force along z)
    for step in range(4):
        sensordata = state["sensordata"].clone()
        forces = torch.zeros(1, 4, 4, dtype=sensordata.dtype)
        forces[:, :, 3] = 50.0
        if step < 3:
            forces[:, 0, 3] = 0.0
        sensordata[:, contact] = forces.flatten(1)
        task.update_context({**state, "sensordata": sensordata}, torch.zeros(1, 12, dtype=torch.float64))
    # the feet stood at the reset; foot 0 is seen off the ground at three steps and lands at the fourth: its air
    # time is counted from the last step it was seen on the ground, 4 steps of 0.02 s (legged_gym's count). The
    # air time lives in the feet_air_time term's object (a term with state), not in the task.
    (air,) = [fn for entry, fn in task._bound["rewards"] if entry.name == "feet_air_time"]
    torch.testing.assert_close(air.landed[0, 0], torch.tensor(0.08, dtype=torch.float64))
    assert air.air_time[0].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_history_stacks_frames_oldest_first() -> None:
    # one window layout (robopt.envs.history, policy.history): frames [obs (48), previous action (12)], oldest first
    from robopt.envs.history import HistoryEnv

    env = HistoryEnv(quadruped(2, quiet_task()), 3)
    obs = env.reset(seed=0)
    assert obs.shape == (2, 3 * 60)
    frames = obs.view(2, 3, 60)
    torch.testing.assert_close(frames[:, 0], frames[:, 2])  # a new episode's window is its first frame, 3 times
    action = 0.1 * torch.ones(2, 12)
    next_obs, *_ = env.step(action)
    after = next_obs.view(2, 3, 60)
    torch.testing.assert_close(after[:, :2], frames[:, 1:])  # the window slid by one
    assert not torch.equal(after[:, 2, :48], frames[:, 2, :48])
    torch.testing.assert_close(after[:, 2, 48:], action)  # the action applied just before the newest observation


def test_the_task_keeps_no_window_of_its_own() -> None:
    # the task-level history is gone (issue 52: one history): the task's observation is one step's terms
    env = quadruped(2, quiet_task())
    assert env.reset(seed=0).shape == (2, 48) and not hasattr(env.task.config, "history")


def test_commands_are_resampled_on_their_interval() -> None:
    # 0.1 s at 0.02 s per step: new commands after steps 5 and 10, the same in between
    commands = {"type": "velocity", "resample_s": [0.1, 0.1]}
    env = quadruped(2, quiet_task(commands=commands, terminations={}))
    env.reset(seed=0)
    seen = []
    for _ in range(11):
        obs, *_ = env.step(torch.zeros(2, 12))
        seen.append(obs[:, 9:12].clone())  # velocity_command, after base_lin_vel, base_ang_vel, gravity
    assert all(torch.equal(seen[i], seen[0]) for i in range(4))
    assert not torch.equal(seen[4], seen[3]) and all(torch.equal(seen[i], seen[4]) for i in range(5, 9))
    assert not torch.equal(seen[9], seen[8])


def test_privileged_terms_reach_the_critic() -> None:
    env = quadruped(
        2,
        quiet_task(critic={"feet_contact": {}, "feet_height": {}, "base_height": {}}),
        randomization={"geom_friction": [0.5, 1.5]},
    )
    env.reset(seed=0)
    geoms = env.physics.mj_model.ngeom
    assert env.privileged_dim == 3 * geoms + 4 + 4 + 1  # friction scales, then the task's block
    _, _, _, _, info = env.step(torch.zeros(2, 12))
    privileged = env.privileged_obs()
    assert privileged.shape == (2, env.privileged_dim) and info["final_privileged_obs"].shape == privileged.shape
    assert set(privileged[:, 3 * geoms : 3 * geoms + 4].unique().tolist()) <= {0.0, 1.0}  # contacts as 0/1
    # a critic term's scale and clip apply as an observation term's do; noise and bias are refused (one line)
    scaled = quadruped(2, quiet_task(critic={"feet_contact": {"scale": 3.0}, "base_height": {"clip": 0.05}}))
    scaled.reset(seed=0)
    block = scaled.privileged_obs()  # [2, 4 + 1]
    assert set(block[:, :4].unique().tolist()) <= {0.0, 3.0} and (block[:, 4] == 0.05).all()  # the base is ~0.3 m up
    with pytest.raises(ValueError, match="task.critic.base_height.noise: the critic sees the privileged state"):
        quadruped(2, quiet_task(critic={"base_height": {"noise": 0.1}}))


def test_motor_strength_scales_the_whole_servo(arm_file) -> None:
    # strength 2 doubles kp and kd: 2 * (20 * 0.3 - 0.5 * 1) = 11 N m at the state of the hand-worked test
    robot = {"mjcf": str(arm_file), "joints": {"shoulder": {"kp": 20.0, "kd": 0.5}},
             "default_pose": {"shoulder": 0.3}, "action_scale": 0.25, "floor": {"type": "none"}}  # fmt: skip
    task = {"observations": {"joint_pos": {}}, "rewards": {"alive": {"weight": 1.0}}}
    env = make_env(
        "robot",
        1,
        backend="mujoco",
        robot=robot,
        task=task,
        seed=0,
        randomization={"motor_strength": [2.0, 2.0], "com_offset": [0.01, 0.01], "com_body": "link"},
    )
    model = env.physics._models[0]
    data = mujoco.MjData(model)
    data.qpos[0], data.qvel[0], data.ctrl[0] = 0.5, 1.0, 2.0
    mujoco.mj_forward(model, data)
    assert data.actuator_force[0] == pytest.approx(11.0)
    nominal = env.physics.mj_model.body_ipos[2]
    torch.testing.assert_close(torch.tensor(model.body_ipos[2] - nominal), torch.full((3,), 0.01, dtype=torch.float64))
    assert env.privileged_obs()[0, -3:].tolist() == pytest.approx([0.01] * 3)  # the offset for the critic


def test_resume_continues_the_same_episodes() -> None:
    kwargs = {"randomization": {"motor_strength": [0.8, 1.2], "action_delay": [0, 1]}}
    first, second = quadruped(3, **kwargs), quadruped(3, **kwargs)
    generator = torch.Generator().manual_seed(0)
    actions = [0.3 * torch.randn(3, 12, generator=generator) for _ in range(30)]
    first.reset(seed=5)
    for action in actions[:10]:
        first.step(action)
    second.load_state_dict(first.state_dict())
    for action in actions[10:]:
        out_first, out_second = first.step(action), second.step(action)
        # same kernels, same shapes, same process: bit equality (DESIGN.md section 8)
        for a, b in zip(out_first[:4], out_second[:4], strict=True):
            assert torch.equal(a, b)


def test_standing_feet_carry_the_robots_weight() -> None:
    # the contact sensors' net forces on four feet add up to m g = 13.0 kg * 9.81 m/s^2 = 127.5 N once it settles
    env = quadruped(2, quiet_task(reset={}))
    env.reset(seed=0)
    for _ in range(50):
        env.step(torch.zeros(2, 12))
    signals = Signals(env.physics.state(), env.task.robot, env.task.context)
    assert signals.feet_contact.all()
    torch.testing.assert_close(
        signals.feet_force.sum(1), torch.full((2,), 127.5, dtype=torch.float64), atol=3.0, rtol=0
    )
    assert float(env.physics.mj_model.body_mass.sum()) == pytest.approx(13.0)


def test_a_users_terms_and_command_each_come_from_one_file() -> None:
    # tests/robots/hooks.py declares a reward with state, an observation with a deploy source and a command kind;
    # the config names them and nothing else in robopt changes
    task = quiet_task(
        commands={"hook": "tests.robots.hooks:ForwardCommand", "speed": [0.5, 0.5], "resample_s": [100.0, 100.0]},
        rewards={
            "steps": {"hook": "tests.robots.hooks:StepsSinceReset", "weight": 1.0, "after": 3.0},
            "track_lin_vel_xy": {"weight": 1.0},
        },
        terminations={},
    )
    task["observations"]["effort"] = {"hook": "tests.robots.hooks:joint_effort", "scale": 0.1}
    env = quadruped(2, task)
    obs = env.reset(seed=0)
    assert obs.shape == (2, 60)  # 48 + the 12 torques
    torch.testing.assert_close(obs[:, 9:12], torch.tensor([[1.0, 0.0, 0.0]] * 2))  # 0.5 m/s, scaled by 2
    paid = []
    for _ in range(4):
        obs, *_ = env.step(torch.zeros(2, 12))
        paid.append(float(env.task.log()["reward/steps"]))
    # the stateful reward pays weight 1.0 x dt 0.02 once the episode has lasted 3 steps (its own counter)
    assert paid == [0.0, 0.0, pytest.approx(0.02), pytest.approx(0.02)]
    torque = Signals(env.physics.state(), env.task.robot, env.task.context).joint_torque
    torch.testing.assert_close(obs[:, 48:], (0.1 * torque).float())  # the declared observation, scaled
    assert env.task.state_dict()["terms"]["rewards.steps"]["steps"].tolist() == [4.0, 4.0]
