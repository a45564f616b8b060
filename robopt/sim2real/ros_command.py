"""The command side of the ROS 2 deploy map: where the action goes (``robot.command`` of a deploy config).

Torch-free (numpy, stdlib). ``std_msgs/Float64MultiArray`` (``data``), ``sensor_msgs/JointState`` (``field`` with
``joints``) or ``geometry_msgs/Twist`` (``fields``), each carrying scale * action + offset; or ``targets:
joint_position`` for a robot from its description (scale and offset from the sidecar, joints mapped by name). A
``joint_position_delta`` policy's targets are the measured joint positions (from its ``joint_pos`` observation,
``robopt.sim2real.joint_measure``) plus scale * action; a gripper's element is absolute (offset + scale * action).
In training the env adds the step to the position it measures that instant; a deployed measurement is a tick or two
old, so the target lags by the motion since and the arm crawls: lift over ROS 2 succeeded in 0.18 of 100 episodes with
10 ms of latency and 1 % loss, against 1.00 in process (docs/manipulation.md). Stepping from the last target sent
instead (an integrator) was tried and did worse (0 of 6): the arm then tracks faster than the PD lag the policy
learned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robopt.sim2real.joint_measure import measured_joints
from robopt.sim2real.ros_fields import check_scalar_fields, fail, names_of, numbers_of, qos_of
from robopt.sim2real.ros_messages import MessageTypeError, check_topic_name, full_type_name, short_type_name
from robopt.sim2real.transport import QOS_PROFILES, Qos


@dataclass(frozen=True)
class CommandMap:
    topic: str
    type: str
    field: str  # JointState: position, velocity or effort
    joints: tuple[str, ...]
    fields: tuple[str, ...]  # Twist: one dotted path per action
    scale: np.ndarray | float
    offset: np.ndarray | float
    qos: Qos = Qos("reliable", 10)
    order: tuple[int, ...] = ()  # targets: the action index of each value in the message (empty: action order)
    # targets of a delta policy: obs [D] -> measured joint positions [A] (NaN where the offset applies, a gripper's)
    measured: Callable[[np.ndarray], np.ndarray] | None = None


def _targets(value: dict, full: str, robot: dict | None, action_dim: int) -> CommandMap:
    """``targets: joint_position``: scale and offset from the sidecar, the message's joints mapped by name."""
    key = "robot.command"
    if value["targets"] != "joint_position":
        raise fail(f"{key}.targets", f"{value['targets']!r} is not allowed; allowed: joint_position")
    if not robot or robot.get("action_type") not in ("joint_position", "joint_position_delta"):
        raise fail(
            f"{key}.targets",
            "joint_position targets need a policy of a robot from its description with "
            "joint_position or joint_position_delta actions (policy.json's robot block)",
        )
    measured = None
    if robot["action_type"] == "joint_position_delta":
        measured, why = measured_joints(robot, action_dim)
        if measured is None:
            raise fail(f"{key}.targets", f"a joint_position_delta policy's targets need its measured joints, but {why}")
    if set(value) & {"scale", "offset", "fields"}:
        raise fail(key, "with targets the sidecar gives scale and offset; no scale, offset or fields")
    names = list(robot["joint_names"])
    joints = names_of(value.get("joints"), f"{key}.joints", "joints") or tuple(names)
    unknown = [j for j in joints if j not in names]
    if unknown:
        raise fail(f"{key}.joints", f"{unknown[0]!r} is not a joint of the policy; its joints are: {', '.join(names)}")
    if len(joints) != len(names):
        missing = [j for j in names if j not in joints]
        raise fail(f"{key}.joints", f"every joint of the policy, once: {', '.join(missing)} missing")
    path = value.get("field", "position" if full == "sensor_msgs/msg/JointState" else "")
    if full == "sensor_msgs/msg/JointState" and path != "position":
        raise fail(f"{key}.field", f"joint_position targets go in a JointState's position, not {path!r}")
    if full == "std_msgs/msg/Float64MultiArray" and path not in ("", "data"):
        raise fail(key, "a Float64MultiArray command carries the targets in data: no field")
    if full not in ("sensor_msgs/msg/JointState", "std_msgs/msg/Float64MultiArray"):
        raise fail(
            f"{key}.type",
            f"{short_type_name(full)} cannot carry joint positions; joint_position targets go "
            "out as sensor_msgs/JointState (position) or std_msgs/Float64MultiArray (a "
            "ros2_control position controller's commands)",
        )
    order = tuple(names.index(j) for j in joints)
    scale = np.asarray(robot["action_scale"], dtype=np.float64)
    offset = np.asarray(robot["action_offset"], dtype=np.float64)
    if scale.shape != (action_dim,) or offset.shape != (action_dim,):
        raise fail(f"{key}.targets", f"the sidecar's action scale and offset do not have {action_dim} values")
    qos = qos_of(value.get("qos"), f"{key}.qos", Qos(*QOS_PROFILES["reliable"]))
    field_name = "data" if full == "std_msgs/msg/Float64MultiArray" else "position"
    return CommandMap(value["topic"], full, field_name, joints, (), scale, offset, qos, order, measured)


def parse_command(value, action_dim: int, robot: dict | None = None) -> CommandMap:
    key = "robot.command"
    allowed = {"topic", "type", "field", "joints", "fields", "scale", "offset", "qos", "targets"}
    if not isinstance(value, dict):
        raise fail(key, f"expected a mapping with topic and type, got {value!r}")
    if set(value) - allowed:
        raise fail(key, f"unknown key {sorted(set(value) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    try:
        topic = check_topic_name(value.get("topic"))
        full = full_type_name(value.get("type", "std_msgs/Float64MultiArray"))
    except MessageTypeError as error:
        raise fail(key, str(error)) from None
    if "targets" in value:
        return _targets({**value, "topic": topic}, full, robot, action_dim)
    scale = numbers_of(value.get("scale", 1.0), f"{key}.scale", "scale")
    offset = numbers_of(value.get("offset", 0.0), f"{key}.offset", "offset")
    for name, number in (("scale", scale), ("offset", offset)):
        if isinstance(number, np.ndarray) and number.size != action_dim:
            raise fail(f"{key}.{name}", f"{number.size} numbers for {action_dim} actions")
    joints = names_of(value.get("joints"), f"{key}.joints", "joints")
    fields = names_of(value.get("fields"), f"{key}.fields", "fields")
    path = value.get("field", "")
    if full == "std_msgs/msg/Float64MultiArray":
        if joints or fields or path not in ("", "data"):
            raise fail(key, "a Float64MultiArray command carries the actions in data: no field, joints or fields")
        path = "data"
    elif full == "sensor_msgs/msg/JointState":
        if path not in ("position", "velocity", "effort") or len(joints) != action_dim or fields:
            raise fail(
                key,
                f"a JointState command needs field (position, velocity or effort) and joints, one "
                f"name per action ({action_dim})",
            )
    elif full == "geometry_msgs/msg/Twist":
        if len(fields) != action_dim or joints or path:
            raise fail(
                key,
                f"a Twist command needs fields, one dotted path per action ({action_dim}), e.g. [linear.x, angular.z]",
            )
        check_scalar_fields(full, fields, f"{key}.fields")
    else:
        raise fail(
            f"{key}.type", "a command is a std_msgs/Float64MultiArray, sensor_msgs/JointState or geometry_msgs/Twist"
        )
    qos = qos_of(value.get("qos"), f"{key}.qos", Qos(*QOS_PROFILES["reliable"]))
    return CommandMap(topic, full, path, joints, fields, scale, offset, qos)
