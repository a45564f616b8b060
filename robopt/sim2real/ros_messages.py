"""The ROS 2 message types robopt ships, their DDS names and their RIHS01 type hashes (torch-free, stdlib only).

A message type is a tuple of ``(field, type)`` in declaration order, as in its ``.msg`` file. A field type is a
primitive (``float64``, ``uint32``, ``string``...), a message type name (``geometry_msgs/msg/Vector3``), an
unbounded sequence (``float64[]``) or a fixed array (``float64[36]``). The definitions are those of ROS 2
(Humble to Jazzy and Rolling: these types have not changed); ``tests/sim2real`` checks each one, its CDR bytes
and its hash against rosbags' copy of the ROS 2 definitions.

Names as ROS 2 maps them onto DDS (rmw_cyclonedds, rmw_fastrtps): the topic ``/joint_states`` is the DDS topic
``rt/joint_states``; the type ``sensor_msgs/msg/JointState`` is the DDS type ``sensor_msgs::msg::dds_::JointState_``.

RIHS01 (REP 2011, ROS 2 Iron and later): ``RIHS01_`` + the SHA-256 of a JSON text describing the type and every
type it refers to (fields with numeric type ids, capacities and nested type names; referenced types sorted by
name); ``type_hash`` builds it. Nodes put it in their endpoints' USER_DATA and rmw_zenoh in its key expressions.
"""

from __future__ import annotations

import hashlib
import json
import re

MESSAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "builtin_interfaces/msg/Time": (("sec", "int32"), ("nanosec", "uint32")),
    "std_msgs/msg/Header": (("stamp", "builtin_interfaces/msg/Time"), ("frame_id", "string")),
    "sensor_msgs/msg/JointState": (
        ("header", "std_msgs/msg/Header"),
        ("name", "string[]"),
        ("position", "float64[]"),
        ("velocity", "float64[]"),
        ("effort", "float64[]"),
    ),
    "geometry_msgs/msg/Vector3": (("x", "float64"), ("y", "float64"), ("z", "float64")),
    "geometry_msgs/msg/Point": (("x", "float64"), ("y", "float64"), ("z", "float64")),
    "geometry_msgs/msg/Quaternion": (("x", "float64"), ("y", "float64"), ("z", "float64"), ("w", "float64")),
    "geometry_msgs/msg/Pose": (
        ("position", "geometry_msgs/msg/Point"),
        ("orientation", "geometry_msgs/msg/Quaternion"),
    ),
    "geometry_msgs/msg/PoseWithCovariance": (("pose", "geometry_msgs/msg/Pose"), ("covariance", "float64[36]")),
    "geometry_msgs/msg/Twist": (("linear", "geometry_msgs/msg/Vector3"), ("angular", "geometry_msgs/msg/Vector3")),
    "geometry_msgs/msg/TwistWithCovariance": (("twist", "geometry_msgs/msg/Twist"), ("covariance", "float64[36]")),
    "sensor_msgs/msg/Imu": (
        ("header", "std_msgs/msg/Header"),
        ("orientation", "geometry_msgs/msg/Quaternion"),
        ("orientation_covariance", "float64[9]"),
        ("angular_velocity", "geometry_msgs/msg/Vector3"),
        ("angular_velocity_covariance", "float64[9]"),
        ("linear_acceleration", "geometry_msgs/msg/Vector3"),
        ("linear_acceleration_covariance", "float64[9]"),
    ),
    "nav_msgs/msg/Odometry": (
        ("header", "std_msgs/msg/Header"),
        ("child_frame_id", "string"),
        ("pose", "geometry_msgs/msg/PoseWithCovariance"),
        ("twist", "geometry_msgs/msg/TwistWithCovariance"),
    ),
    "std_msgs/msg/MultiArrayDimension": (("label", "string"), ("size", "uint32"), ("stride", "uint32")),
    "std_msgs/msg/MultiArrayLayout": (("dim", "std_msgs/msg/MultiArrayDimension[]"), ("data_offset", "uint32")),
    "std_msgs/msg/Float64MultiArray": (("layout", "std_msgs/msg/MultiArrayLayout"), ("data", "float64[]")),
    "std_msgs/msg/UInt32": (("data", "uint32"),),
}
"""Every shipped message type (and the types they contain), full name -> fields."""

# The types a deploy config may name for its topics (the others are parts of these).
TOPIC_TYPES = (
    "sensor_msgs/msg/JointState",
    "sensor_msgs/msg/Imu",
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/Twist",
    "std_msgs/msg/Float64MultiArray",
)

# primitive -> (struct format character, size in bytes); ``string`` is handled apart
PRIMITIVES = {
    "bool": ("?", 1),
    "byte": ("B", 1),
    "char": ("B", 1),
    "int8": ("b", 1),
    "uint8": ("B", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "uint64": ("Q", 8),
    "float32": ("f", 4),
    "float64": ("d", 8),
}

# REP 2011's field type ids; nested types are 1, a fixed array adds 48, an unbounded sequence 144
_TYPE_IDS = {"int8": 2, "uint8": 3, "int16": 4, "uint16": 5, "int32": 6, "uint32": 7, "int64": 8, "uint64": 9,
             "float32": 10, "float64": 11, "char": 13, "bool": 15, "byte": 16, "string": 17}  # fmt: skip
_ARRAY = re.compile(r"^(?P<item>[^\[\]]+)\[(?P<size>\d*)\]$")


class MessageTypeError(ValueError):
    """A message type or field that robopt does not ship (one line naming it and what exists)."""


def full_type_name(name: str) -> str:
    """``sensor_msgs/JointState`` or ``sensor_msgs/msg/JointState`` -> ``sensor_msgs/msg/JointState``."""
    parts = str(name).strip().split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    full = "/".join(parts)
    if full not in MESSAGES:
        shipped = ", ".join(short_type_name(t) for t in TOPIC_TYPES)
        raise MessageTypeError(f"unknown message type {name!r}; robopt ships {shipped}")
    return full


def short_type_name(full: str) -> str:
    """``sensor_msgs/msg/JointState`` -> ``sensor_msgs/JointState``."""
    package, _, name = full.split("/")
    return f"{package}/{name}"


def parse_field_type(field_type: str) -> tuple[str, int | None]:
    """(item type, None for a single value, 0 for an unbounded sequence, N for a fixed array of N)."""
    match = _ARRAY.match(field_type)
    if match is None:
        return field_type, None
    size = match.group("size")
    return match.group("item"), int(size) if size else 0


def dds_type_name(full: str) -> str:
    """``sensor_msgs/msg/JointState`` -> ``sensor_msgs::msg::dds_::JointState_`` (rmw's DDS type name)."""
    package, interface, name = full.split("/")
    return f"{package}::{interface}::dds_::{name}_"


def dds_topic_name(topic: str) -> str:
    """A ROS 2 topic (``/joint_states``) -> its DDS topic (``rt/joint_states``)."""
    check_topic_name(topic)
    return "rt" + topic


def check_topic_name(topic: str) -> str:
    """A fully qualified ROS 2 topic name: ``/`` then tokens of letters, digits and ``_`` separated by ``/``."""
    if not isinstance(topic, str) or not re.fullmatch(r"(/[A-Za-z_][A-Za-z0-9_]*)+", topic):
        raise MessageTypeError(
            f"topic {topic!r} is not a fully qualified ROS 2 topic name (e.g. /joint_states: '/' then letters, "
            "digits and '_', not starting with a digit)"
        )
    return topic


def field_type(full: str, path: str) -> str:
    """The type of a dotted field path of a message type (``twist.twist.linear`` of nav_msgs/msg/Odometry)."""
    current = full
    for depth, name in enumerate(path.split(".")):
        fields = dict(MESSAGES.get(current, ()))
        if name not in fields:
            where = ".".join(path.split(".")[:depth]) or short_type_name(full)
            allowed = ", ".join(fields) or "(none: it is not a message)"
            raise MessageTypeError(f"{short_type_name(full)} has no field {path!r} ({where} holds {allowed})")
        current = fields[name]
    return current


def _type_description(full: str) -> dict:
    fields = []
    for name, spec in MESSAGES[full]:
        item, size = parse_field_type(spec)
        increment = 0 if size is None else (48 if size > 0 else 144)
        nested = item if item in MESSAGES else ""
        type_id = increment + (1 if nested else _TYPE_IDS[item])
        fields.append(
            {
                "name": name,
                "type": {"type_id": type_id, "capacity": size or 0, "string_capacity": 0, "nested_type_name": nested},
            }
        )
    return {"type_name": full, "fields": fields}


def _referenced(full: str, seen: set[str]) -> set[str]:
    for _, spec in MESSAGES[full]:
        item, _ = parse_field_type(spec)
        if item in MESSAGES and item not in seen:
            seen.add(item)
            _referenced(item, seen)
    return seen


def type_hash(full: str) -> str:
    """RIHS01 type hash of a shipped message type (REP 2011; module doc)."""
    description = {
        "type_description": _type_description(full),
        "referenced_type_descriptions": [_type_description(name) for name in sorted(_referenced(full, set()))],
    }
    return "RIHS01_" + hashlib.sha256(json.dumps(description).encode()).hexdigest()
