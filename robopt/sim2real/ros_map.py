"""The declarative map between ROS 2 messages and a policy: which fields make the observation, where the action goes.

Torch-free (numpy, stdlib). Shapes: D obs dim, A action dim. The deploy config's ``robot`` section::

    robot:
      ros2: {domain_id: 0}                 # or zenoh: {connect: [tcp/127.0.0.1:7447]} (the transport's options)
      qos: sensor_data                     # default QoS of every topic: sensor_data | reliable | {reliability, depth}
      stamps: header                       # header: the message's stamp is the measurement time; receive: arrival
      command: {topic: /effort_controller/commands, type: std_msgs/Float64MultiArray, scale: 1.0}
      observation:
        - {topic: /joint_states, type: sensor_msgs/JointState, field: position, joints: [hinge], transform: [cos, sin]}
        - {topic: /joint_states, field: velocity, joints: [hinge]}

Observation entries, concatenated in order into the observation [D]: ``topic``; ``type`` (on the first entry of a
topic; one of ``TOPIC_TYPES``); ``field``, a dotted path to a number, a message of numbers (a Vector3 is x, y, z;
a Quaternion x, y, z, w) or an array; ``joints`` picks JointState entries by name; ``index`` picks array elements;
``transform``: ``identity``, ``cos``, ``sin``, ``gravity`` (a quaternion x, y, z, w to the unit gravity direction
in the body frame, R^T [0, 0, -1], as legged-robot policies observe it), ``{scale: s, offset: o}`` (s x + o), or
``{hook: "package.module:function"}`` (any numpy function of the vector); a list applies each to the selected
vector and concatenates the results (``[cos, sin]`` of angles q gives cos q then sin q, Gymnasium's layout).
Per topic ``qos`` overrides the default (``robot.qos``, sensor_data: best effort, which matches reliable and
best-effort publishers alike). The command (reliable unless its ``qos`` says otherwise, as ROS 2 subscribers
expect): ``topic``, ``type`` (Float64MultiArray: ``data``; JointState: ``field`` with ``joints``; Twist:
``fields``, one dotted path per action, e.g. [linear.x, angular.z]), ``scale`` and ``offset`` (the message carries
scale * action + offset). Every problem is a one-line ConfigError naming the key.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robopt.options import ConfigError
from robopt.sim2real.ros_fields import gravity_in_body
from robopt.sim2real.ros_messages import (
    MESSAGES,
    TOPIC_TYPES,
    MessageTypeError,
    check_topic_name,
    field_type,
    full_type_name,
    parse_field_type,
    short_type_name,
)
from robopt.sim2real.transport import QOS_PROFILES, RELIABILITY, Qos

STAMPS = ("header", "receive")
ELEMENT_TRANSFORMS = ("identity", "cos", "sin", "gravity")


@dataclass(frozen=True)
class Selection:
    """One observation entry: ``extract(message) -> vector``, with its static size (None: known at run time)."""

    topic: str
    type: str
    field: str
    joints: tuple[str, ...]
    index: tuple[int, ...]
    transforms: tuple[Callable[[np.ndarray], np.ndarray], ...]
    size: int | None
    key: str  # robot.observation[i], for messages


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


@dataclass(frozen=True)
class RobotMap:
    """The whole ``robot`` section, checked: topics with their type and QoS, the entries, the command."""

    topics: dict[str, tuple[str, Qos]]
    observation: tuple[Selection, ...]
    command: CommandMap
    stamps: str = "header"
    transport: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ parsing


def _fail(key: str, message: str) -> ConfigError:
    return ConfigError(f"{key}: {message}")


def _qos(value, key: str, default: Qos) -> Qos:
    if value is None:
        return default
    if isinstance(value, str):
        if value not in QOS_PROFILES:
            raise _fail(key, f"unknown QoS profile {value!r}; allowed: {', '.join(QOS_PROFILES)} or a mapping")
        return Qos(*QOS_PROFILES[value])
    if not isinstance(value, dict) or set(value) - {"reliability", "depth"}:
        raise _fail(key, f"expected a profile name or {{reliability, depth}}, got {value!r}")
    reliability, depth = value.get("reliability", default.reliability), value.get("depth", default.depth)
    if reliability not in RELIABILITY:
        raise _fail(key, f"reliability {reliability!r} is not allowed; allowed: {', '.join(RELIABILITY)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 10_000:
        raise _fail(key, f"depth must be an integer in 1..10000, got {depth!r}")
    return Qos(reliability, depth)


def _names(value, key: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise _fail(key, f"{what} must be a list of non-empty strings, got {value!r}")
    if len(set(value)) != len(value):
        raise _fail(key, f"{what} repeat: {list(value)}")
    return tuple(value)


def _indices(value, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _fail(key, f"index must be a list of integers, got {value!r}")
    if any(v < 0 for v in value):
        raise _fail(key, f"index values must be >= 0, got {list(value)}")
    return tuple(value)


def _numbers(value, key: str, name: str) -> np.ndarray | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    ):
        return np.asarray(value, dtype=np.float64)
    raise _fail(key, f"{name} must be a finite number or a list of them, got {value!r}")


def numeric_size(full: str, path: str) -> int | None:
    """How many numbers a field holds (None for a sequence: known when a message arrives); ConfigError-ready."""
    spec = field_type(full, path)
    item, size = parse_field_type(spec)
    if item == "string":
        raise MessageTypeError(f"{short_type_name(full)} field {path!r} is a string, not numbers")
    if item in MESSAGES:
        if size is not None:
            raise MessageTypeError(f"{short_type_name(full)} field {path!r} is a list of messages, not numbers")
        sizes = [numeric_size(item, name) for name, spec in MESSAGES[item] if parse_field_type(spec)[0] != "string"]
        return None if any(s is None for s in sizes) else sum(sizes)
    return 1 if size is None else (size or None)


def _hook(spec, key: str) -> Callable[[np.ndarray], np.ndarray]:
    module_name, _, function_name = str(spec).partition(":")
    if not module_name or not function_name:
        raise _fail(key, f"hook {spec!r} must read 'package.module:function'")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise _fail(key, f"hook {spec!r} cannot be loaded ({type(error).__name__}: {error})") from None
    if not callable(function):
        raise _fail(key, f"hook {spec!r} is not callable")
    return lambda vector: np.asarray(function(vector), dtype=np.float64).reshape(-1)


def _transform(item, key: str) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[int], int | None]]:
    """(function, size of its output for an input of n numbers)."""
    if item == "identity":
        return (lambda v: v), (lambda n: n)
    if item == "cos":
        return np.cos, (lambda n: n)
    if item == "sin":
        return np.sin, (lambda n: n)
    if item == "gravity":
        return gravity_in_body, (lambda n: None if n is None else 3 * (n // 4))
    if isinstance(item, dict) and set(item) <= {"scale", "offset"} and item:
        scale = _numbers(item.get("scale", 1.0), key, "scale")
        offset = _numbers(item.get("offset", 0.0), key, "offset")
        return (lambda v: scale * v + offset), (lambda n: n)
    if isinstance(item, dict) and set(item) == {"hook"}:
        return _hook(item["hook"], key), (lambda n: None)
    raise _fail(key, f"unknown transform {item!r}; allowed: {', '.join(ELEMENT_TRANSFORMS)}, {{scale, offset}}, "
                     "{hook: 'package.module:function'}, or a list of these")  # fmt: skip


def _selection(entry, i: int, topics: dict, default_qos: Qos) -> Selection:
    key = f"robot.observation[{i}]"
    allowed = {"topic", "type", "field", "joints", "index", "transform", "qos"}
    if not isinstance(entry, dict):
        raise _fail(key, f"expected a mapping with topic and field, got {entry!r}")
    if set(entry) - allowed:
        raise _fail(key, f"unknown key {sorted(set(entry) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    try:
        topic = check_topic_name(entry.get("topic"))
    except MessageTypeError as error:
        raise _fail(f"{key}.topic", str(error)) from None
    if "type" in entry:
        try:
            full = full_type_name(entry["type"])
        except MessageTypeError as error:
            raise _fail(f"{key}.type", str(error)) from None
        if full not in TOPIC_TYPES:
            raise _fail(f"{key}.type", f"{entry['type']!r} is part of a message, not a topic type; allowed: "
                                       f"{', '.join(short_type_name(t) for t in TOPIC_TYPES)}")  # fmt: skip
        if topic in topics and topics[topic][0] != full:
            raise _fail(f"{key}.type", f"{topic} is {short_type_name(topics[topic][0])} in an earlier entry")
        topics[topic] = (full, _qos(entry.get("qos"), f"{key}.qos", topics.get(topic, (full, default_qos))[1]))
    elif topic not in topics:
        raise _fail(key, f"the first entry of {topic} needs its type (e.g. type: sensor_msgs/JointState)")
    elif "qos" in entry:
        topics[topic] = (topics[topic][0], _qos(entry["qos"], f"{key}.qos", topics[topic][1]))
    full = topics[topic][0]
    path = entry.get("field")
    if not isinstance(path, str) or not path:
        raise _fail(f"{key}.field", f"missing: a field of {short_type_name(full)}, e.g. "
                                    f"{next(n for n, _ in MESSAGES[full] if n != 'header')}")  # fmt: skip
    try:
        size = numeric_size(full, path)
    except MessageTypeError as error:
        raise _fail(f"{key}.field", str(error)) from None
    joints = _names(entry.get("joints"), f"{key}.joints", "joints")
    index = _indices(entry.get("index"), f"{key}.index")
    if joints and (full != "sensor_msgs/msg/JointState" or path not in ("position", "velocity", "effort")):
        raise _fail(f"{key}.joints", "joints pick entries of a JointState's position, velocity or effort")
    if joints and index:
        raise _fail(key, "give joints or index, not both")
    if joints or index:
        size = len(joints or index)
        if index and numeric_size(full, path) is not None and max(index) >= numeric_size(full, path):
            raise _fail(f"{key}.index", f"{path} holds {numeric_size(full, path)} numbers; index {max(index)} is out")
    raw = entry.get("transform", "identity")
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise _fail(f"{key}.transform", "an empty list; use identity")
    transforms, out = [], 0
    for item in items:
        function, out_size = _transform(item, f"{key}.transform")
        if item == "gravity" and size is not None and size % 4:
            raise _fail(f"{key}.transform", f"gravity takes quaternions (4 numbers each), {path} gives {size}")
        transforms.append(function)
        part = out_size(size)
        out = None if part is None or out is None else out + part
    return Selection(topic, full, path, joints, index, tuple(transforms), out, key)


def _command(value, action_dim: int) -> CommandMap:
    key = "robot.command"
    allowed = {"topic", "type", "field", "joints", "fields", "scale", "offset", "qos"}
    if not isinstance(value, dict):
        raise _fail(key, f"expected a mapping with topic and type, got {value!r}")
    if set(value) - allowed:
        raise _fail(key, f"unknown key {sorted(set(value) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    try:
        topic = check_topic_name(value.get("topic"))
        full = full_type_name(value.get("type", "std_msgs/Float64MultiArray"))
    except MessageTypeError as error:
        raise _fail(key, str(error)) from None
    scale = _numbers(value.get("scale", 1.0), f"{key}.scale", "scale")
    offset = _numbers(value.get("offset", 0.0), f"{key}.offset", "offset")
    for name, number in (("scale", scale), ("offset", offset)):
        if isinstance(number, np.ndarray) and number.size != action_dim:
            raise _fail(f"{key}.{name}", f"{number.size} numbers for {action_dim} actions")
    joints = _names(value.get("joints"), f"{key}.joints", "joints")
    fields = _names(value.get("fields"), f"{key}.fields", "fields")
    path = value.get("field", "")
    if full == "std_msgs/msg/Float64MultiArray":
        if joints or fields or path not in ("", "data"):
            raise _fail(key, "a Float64MultiArray command carries the actions in data: no field, joints or fields")
        path = "data"
    elif full == "sensor_msgs/msg/JointState":
        if path not in ("position", "velocity", "effort") or len(joints) != action_dim or fields:
            raise _fail(key, f"a JointState command needs field (position, velocity or effort) and joints, one "
                             f"name per action ({action_dim})")  # fmt: skip
    elif full == "geometry_msgs/msg/Twist":
        if len(fields) != action_dim or joints or path:
            raise _fail(key, f"a Twist command needs fields, one dotted path per action ({action_dim}), e.g. "
                             "[linear.x, angular.z]")  # fmt: skip
        for name in fields:
            try:
                if numeric_size(full, name) != 1:
                    raise MessageTypeError(f"Twist field {name!r} is not one number (use linear.x, angular.z...)")
            except MessageTypeError as error:
                raise _fail(f"{key}.fields", str(error)) from None
    else:
        raise _fail(f"{key}.type", "a command is a std_msgs/Float64MultiArray, sensor_msgs/JointState or "
                                   "geometry_msgs/Twist")  # fmt: skip
    qos = _qos(value.get("qos"), f"{key}.qos", Qos(*QOS_PROFILES["reliable"]))
    return CommandMap(topic, full, path, joints, fields, scale, offset, qos)


def parse_robot_map(section: dict | None, transport: str, obs_dim: int, action_dim: int) -> RobotMap:
    """The checked map of a deploy config's ``robot`` section for ``transport`` (``ros2`` or ``zenoh``).

    Without a section, or with one that only sets transport options: robopt's simulated robot's topics
    (``/robopt/observation`` and ``/robopt/command``, both Float64MultiArray, as ``robopt sim-robot --ros2`` serves
    them).
    """
    section = dict(section or {})
    if "observation" not in section and "command" not in section:  # transport options only: sim-robot's topics
        section = {**DEFAULT_MAP, **section}
    allowed = {"ros2", "zenoh", "qos", "stamps", "observation", "command"}
    if set(section) - allowed:
        raise _fail(
            "robot", f"unknown key {sorted(set(section) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )
    options = section.get(transport) or {}
    if not isinstance(options, dict):
        raise _fail(f"robot.{transport}", f"expected a mapping of options, got {options!r}")
    stamps = section.get("stamps", "header")
    if stamps not in STAMPS:
        raise _fail("robot.stamps", f"{stamps!r} is not allowed; allowed: {', '.join(STAMPS)}")
    default_qos = _qos(section.get("qos"), "robot.qos", Qos(*QOS_PROFILES["sensor_data"]))
    entries = section.get("observation")
    if not isinstance(entries, list) or not entries:
        raise _fail("robot.observation", "expected a list of entries ({topic, type, field, ...})")
    topics: dict[str, tuple[str, Qos]] = {}
    observation = tuple(_selection(entry, i, topics, default_qos) for i, entry in enumerate(entries))
    sizes = [s.size for s in observation]
    if all(size is not None for size in sizes) and sum(sizes) != obs_dim:
        raise _fail("robot.observation", f"the entries give {sum(sizes)} numbers ({' + '.join(map(str, sizes))}) "
                                         f"but the policy takes {obs_dim}")  # fmt: skip
    command = _command(section.get("command"), action_dim)
    if command.topic in topics:
        raise _fail("robot.command.topic", f"{command.topic} is also an observation topic")
    return RobotMap(dict(topics), observation, command, stamps, dict(options))


DEFAULT_MAP = {
    "qos": "reliable",
    "observation": [{"topic": "/robopt/observation", "type": "std_msgs/Float64MultiArray", "field": "data"}],
    "command": {"topic": "/robopt/command", "type": "std_msgs/Float64MultiArray"},
}
"""The topics of ``robopt sim-robot --ros2/--zenoh``: the observation vector and the action vector."""
