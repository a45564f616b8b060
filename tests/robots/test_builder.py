"""Robots from files not written for robopt: a description without actuators or floor, a scene that includes a
robot file, one with its own actuators, a URDF; and every bad input of the robot section as one line."""

from __future__ import annotations

import mujoco
import pytest
import torch

from robopt.config import ConfigError, build_dataclass
from robopt.envs import make_env
from robopt.envs.robot.builder import build_robot
from robopt.envs.robot.config import RobotConfig, TaskConfig
from tests.robots.conftest import PENDULUM_ARM, quadruped_sections

TASK = {"observations": {"joint_pos": {}, "joint_vel": {}}, "rewards": {"alive": {"weight": 1.0}}}

# A two-leg walker's description: a free base, two hinges, feet as spheres; a scene file includes it, adds a
# ground plane of its own (named "ground") and a keyframe-free default.
BIPED = """<mujoco model="biped">
  <compiler angle="radian"/>
  <worldbody>
    <body name="pelvis" pos="0 0 0.6">
      <freejoint/>
      <geom name="pelvis" type="box" size="0.1 0.15 0.05" mass="4"/>
      <body name="left" pos="0 0.1 -0.05">
        <joint name="left_hip" axis="0 1 0" range="-1 1"/>
        <geom name="left_leg" type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03" mass="1"/>
        <geom name="left_foot" type="sphere" pos="0 0 -0.42" size="0.03" mass="0.1"/>
      </body>
      <body name="right" pos="0 -0.1 -0.05">
        <joint name="right_hip" axis="0 1 0" range="-1 1"/>
        <geom name="right_leg" type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03" mass="1"/>
        <geom name="right_foot" type="sphere" pos="0 0 -0.42" size="0.03" mass="0.1"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
SCENE = """<mujoco model="biped scene">
  <include file="biped.xml"/>
  <worldbody>
    <light pos="0 0 3"/>
    <geom name="ground" type="plane" size="0 0 0.05" friction="0.9 0.01 0.001"/>
  </worldbody>
</mujoco>
"""
BIPED_ROBOT = {"joints": {".*_hip": {"kp": 30.0, "kd": 1.0}}, "feet": [".*_foot"]}


def test_a_description_without_actuators_or_floor_gets_both(arm_file) -> None:
    robot = build_robot(build_dataclass(RobotConfig, {"mjcf": str(arm_file), "joints": {"shoulder": {"kp": 5.0}}}))
    model = robot.model
    assert model.nu == 1 and robot.action_type == "joint_position" and robot.joint_names == ("shoulder",)
    floor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    assert floor >= 0 and model.geom_type[floor] == mujoco.mjtGeom.mjGEOM_PLANE and model.geom_bodyid[floor] == 0
    assert not robot.floating and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0


def test_a_scene_that_includes_a_robot_file_keeps_its_own_ground(tmp_path) -> None:
    (tmp_path / "biped.xml").write_text(BIPED)
    (tmp_path / "scene.xml").write_text(SCENE)
    env = make_env(
        "robot",
        2,
        backend="mujoco",
        robot={"mjcf": str(tmp_path / "scene.xml"), **BIPED_ROBOT},
        task={**TASK, "observations": {"projected_gravity": {}, "feet_contact": {}}},
        seed=0,
    )
    model = env.physics.mj_model
    planes = [g for g in range(model.ngeom) if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE]
    assert [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in planes] == ["ground"]
    robot = env.task.robot
    assert robot.floating and robot.foot_names == ("left_foot", "right_foot")
    # the base starts with its feet on the ground: foot centre 0.05 + 0.42 below the pelvis, radius 0.03
    assert robot.init_qpos[2].item() == pytest.approx(0.05 + 0.42 + 0.03 + 1e-3)
    for _ in range(25):  # standing on two hinges for half a second: both feet carry the weight
        obs, *_ = env.step(torch.zeros(2, 2))
    assert (obs[:, 3:5] == 1.0).all()  # feet_contact after projected_gravity


def test_a_description_with_actuators_keeps_them_unless_replaced(tmp_path) -> None:
    path = tmp_path / "motor_arm.xml"
    path.write_text(
        PENDULUM_ARM.replace(
            "</worldbody>", '</worldbody><actuator><motor joint="shoulder" gear="3" ctrlrange="-1 1"/></actuator>'
        )
    )
    kept = build_robot(build_dataclass(RobotConfig, {"mjcf": str(path)}))
    assert kept.action_type == "native" and kept.model.actuator_gear[0, 0] == 3.0
    replaced = build_robot(
        build_dataclass(RobotConfig, {"mjcf": str(path), "actuators": "replace", "joints": {"shoulder": {"kp": 5.0}}})
    )
    assert replaced.action_type == "joint_position" and replaced.model.nu == 1
    assert replaced.model.actuator_biastype[0] == mujoco.mjtBias.mjBIAS_AFFINE


def test_a_urdf_through_mujocos_import(tmp_path) -> None:
    path = tmp_path / "two_link.urdf"
    path.write_text("""<robot name="two_link">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/>
    </inertial></link>
  <link name="arm"><inertial><origin xyz="0.2 0 0"/><mass value="0.5"/>
    <inertia ixx="0.001" iyy="0.001" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0.2 0 0"/><geometry><sphere radius="0.03"/></geometry></collision></link>
  <joint name="elbow" type="revolute"><parent link="base"/><child link="arm"/><axis xyz="0 0 1"/>
    <limit lower="-2" upper="2" effort="5" velocity="3"/></joint>
</robot>""")
    env = make_env(
        "robot",
        1,
        backend="mujoco",
        robot={"mjcf": str(path), "joints": {"elbow": {"kp": 8.0}}, "floor": {"type": "none"}},
        task=TASK,
        seed=0,
    )
    assert env.action_dim == 1 and env.task.robot.joint_names == ("elbow",)
    env.step(torch.ones(1, 1))


def _robot(arm_file, **changes) -> dict:
    return {"mjcf": str(arm_file), "joints": {"shoulder": {"kp": 5.0}}, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"joints": {"elbow": {"kp": 5.0}}},
            "robot.joints: 'elbow' matches no hinge or slide joint; hinge or slide joints: shoulder",
        ),
        ({"default_pose": {"shoulder": 2.0}}, "robot.default_pose: shoulder=2.0 is outside its range [-1.5, 1.5]"),
        ({"feet": ["toe"]}, "robot.feet: 'toe' matches no geom or body; geoms: rod, tip"),
        ({"base": "pelvis"}, "robot.base='pelvis': no such body; bodies: base, link"),
        ({"joints": {"shoulder": {"kd": 1.0}}}, "robot.joints.shoulder: kp is required for action joint_position"),
        ({"joints": {"sh.*": {"kp": 1.0}, "shoulder": {"kp": 2.0}}}, "robot.joints: joint 'shoulder' matches"),
        ({"mjcf": "robopt:spider"}, "robot.mjcf='robopt:spider': no shipped robot 'spider'; shipped: "),
        ({"mjcf": "no/such/file.xml"}, "robot.mjcf='no/such/file.xml': file not found"),
    ],
)
def test_bad_robot_inputs_are_one_line(arm_file, changes, message) -> None:
    with pytest.raises(ValueError) as error:
        build_robot(build_dataclass(RobotConfig, _robot(arm_file, **changes)))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_model_errors_carry_mujocos_message(tmp_path) -> None:
    mesh = tmp_path / "mesh_robot.xml"
    mesh.write_text(
        '<mujoco><asset><mesh name="shell" file="shell.stl"/></asset><worldbody><body name="b">'
        '<joint name="j"/><geom type="mesh" mesh="shell"/></body></worldbody></mujoco>'
    )
    with pytest.raises(ValueError, match=r"MuJoCo cannot compile it: Error opening file .*shell.stl"):
        build_robot(build_dataclass(RobotConfig, {"mjcf": str(mesh), "joints": {"j": {"kp": 1.0}}}))
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><bodyy/></worldbody></mujoco>")
    with pytest.raises(ValueError, match=r"MuJoCo cannot read it: XML Error: Schema violation: unrecognized element"):
        build_robot(build_dataclass(RobotConfig, {"mjcf": str(broken)}))


@pytest.mark.parametrize(
    ("section", "data", "message"),
    [
        (RobotConfig, {"sim": {"decimation": 0}}, "sim.decimation: expected an integer >= 1, got 0"),
        # issue 52's bad input, each one line before anything is built
        (RobotConfig, {"action_scale": float("nan")}, "robot.action_scale: expected a number, got nan"),
        (RobotConfig, {"action_scale": "nan"}, "robot.action_scale: expected a number, got nan"),
        (RobotConfig, {"action_scale": 0}, "robot.action_scale: expected a finite number > 0, got 0.0"),
        (RobotConfig, {"sim": {"timestep": float("inf")}}, "sim.timestep: expected a finite number > 0, got inf"),
        (TaskConfig, {"rewards": {"track_lin_vel_xy": {"weight": 1, "std": 0}}},
         "rewards.track_lin_vel_xy.std: expected a finite number > 0, got 0"),
        (TaskConfig, {"terminations": {"fall": {"angle": -1}}},
         "terminations.fall.angle: expected an angle in (0, pi] (rad), got -1"),
        (TaskConfig, {"rewards": {"alive": {"weight": float("inf")}}},
         "rewards.alive.weight: expected a finite number, got inf"),
        (TaskConfig, {"observations": {"joint_pos": {"noise": -0.1}}},
         "observations.joint_pos.noise: expected a finite number >= 0, got -0.1"),
        (TaskConfig, {"rewards": {"undesired_contacts": {"weight": -1, "bodies": "thigh"}}},
         "rewards.undesired_contacts.bodies: expected a non-empty list of names"),
        (TaskConfig, {"rewards": {"joint_pos_limits": {"weight": -1, "soft": 1.5}}},
         "rewards.joint_pos_limits.soft: expected a number in [0, 1], got 1.5"),
        (RobotConfig, {"joints": {"x": {"kp": "stiff"}}}, "joints.x.kp: expected a number >= 0, got 'stiff'"),
        (RobotConfig, {"joints": {"x": {"p_gain": 1}}}, "joints.x.p_gain: unknown key; allowed: kp, kd"),
        (TaskConfig, {"rewards": {"fly": {"weight": 1}}}, "rewards.fly: unknown reward term 'fly'; allowed:"),
        (TaskConfig, {"rewards": {"alive": {"weight": "lots"}}},
         "rewards.alive.weight: expected a finite number, got 'lots'"),
        (TaskConfig, {"observations": {"mine": {"hook": "tests.robots.nope:f"}}}, "cannot import 'tests.robots.nope'"),
        (TaskConfig, {"reset": {"spin": 1}}, "reset.spin: unknown key; allowed: joint_pos"),
        (TaskConfig, {"history": 3}, "unknown config key 'task.history'"),  # one window: policy.history
    ],
)  # fmt: skip
def test_bad_sections_are_one_line_config_errors(section, data, message) -> None:
    with pytest.raises(ConfigError) as error:
        build_dataclass(section, data, "robot." if section is RobotConfig else "task.")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_terms_that_need_missing_parts_say_what_to_add(arm_file) -> None:
    _, task = quadruped_sections()
    with pytest.raises(
        ValueError,
        match=r"task.rewards.undesired_contacts.bodies: '.\*_thigh' matches no body; "
        r"bodies: base, link",
    ):
        make_env("robot", 1, backend="mujoco", robot=_robot(arm_file), task=task)
    task = {**TASK, "observations": {"base_lin_vel": {}}}
    with pytest.raises(ValueError, match=r"task.observations.base_lin_vel needs a base with a free joint"):
        make_env("robot", 1, backend="mujoco", robot=_robot(arm_file), task=task)
    task = {**TASK, "rewards": {"feet_slip": {"weight": -1.0}}}
    with pytest.raises(ValueError, match=r"task.rewards.feet_slip needs robot.feet"):
        make_env("robot", 1, backend="mujoco", robot=_robot(arm_file), task=task)
    task = {**TASK, "rewards": {"bad": {"hook": "tests.robots.hooks:broken", "weight": 1.0}}}
    with pytest.raises(
        ValueError,
        match=r"task.rewards.bad \(hook tests.robots.hooks:broken\) failed on the first "
        r"state: AttributeError",
    ):
        make_env("robot", 1, backend="mujoco", robot=_robot(arm_file), task=task)
