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
A list inside the list is a pipeline, applied in order (``[[gravity, {scale: 2}]]``); ``{clip: c}`` clips to
[-c, c]. Two entries that are not plain topic fields:
``{source: last_action}`` is the action this runtime sent last (zero at start), as policies that observe their
last action were trained; ``{input: command, topic: /cmd_vel, type: geometry_msgs/Twist, fields: [linear.x,
linear.y, angular.z], low: [...], high: [...], hold_s: 0.5}`` is a command a person or a planner sends now and
then: clamped into [low, high] (counted ``command_clamped``), held ``hold_s`` after its last message and zero
before the first and after that (one notice), and never a reason for the safe action (its age is not the
measurement's). ``observation: from_sidecar`` builds the whole list from the export's ``robot`` block
(``robopt.sim2real.sidecar_map``).
``episode: {topic: /robot/episode, qos: reliable}`` (optional; ``robopt sim-robot``'s ``/robopt/episode`` in the
default map) is a std_msgs/UInt32 the robot publishes with the number of episodes it has started: each change of
the number is an episode boundary, at which the runtime resets a policy with memory (its first message is the
baseline, not a boundary). It is neither an observation topic nor a reason for the safe action.
Per topic ``qos`` overrides the default (``robot.qos``, sensor_data: best effort, which matches reliable and
best-effort publishers alike). The command (reliable unless its ``qos`` says otherwise, as ROS 2 subscribers
expect): ``topic``, ``type`` (Float64MultiArray: ``data``; JointState: ``field`` with ``joints``; Twist:
``fields``, one dotted path per action, e.g. [linear.x, angular.z]), ``scale`` and ``offset`` (the message carries
scale * action + offset). ``targets: joint_position`` (a robot from its description) takes the scale and offset
from the sidecar (target = default pose + action scale * action) and ``joints`` as the names in the message's order,
mapped to the policy's by name (all of them; default: the policy's order). Every problem is a one-line ConfigError
naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robopt.sim2real.ros_command import CommandMap, parse_command
from robopt.sim2real.ros_fields import (
    check_scalar_fields,
    fail,
    indices_of,
    names_of,
    numbers_of,
    numeric_size,
    qos_of,
    transforms_of,
)
from robopt.sim2real.ros_messages import (
    MESSAGES,
    TOPIC_TYPES,
    MessageTypeError,
    check_topic_name,
    full_type_name,
    short_type_name,
)
from robopt.sim2real.transport import QOS_PROFILES, Qos

STAMPS = ("header", "receive")
EPISODE_TYPE = "std_msgs/msg/UInt32"


@dataclass(frozen=True)
class Selection:
    """One observation entry: ``extract(message) -> vector``, with its static size (None: known at run time).

    ``kind``: ``topic`` (a field of the topic's newest message), ``last_action`` (the runtime's last action) or
    ``command`` (``fields`` of an occasional command message, clamped into [low, high], zero ``hold`` seconds after
    the last one)."""

    topic: str
    type: str
    field: str
    joints: tuple[str, ...]
    index: tuple[int, ...]
    transforms: tuple[Callable[[np.ndarray], np.ndarray], ...]
    size: int | None
    key: str  # robot.observation[i], for messages
    kind: str = "topic"
    fields: tuple[str, ...] = ()
    hold: float = 0.0
    low: np.ndarray | None = None
    high: np.ndarray | None = None


@dataclass(frozen=True)
class RobotMap:
    """The whole ``robot`` section, checked: topics with their type and QoS, the entries, the command."""

    topics: dict[str, tuple[str, Qos]]
    observation: tuple[Selection, ...]
    command: CommandMap
    stamps: str = "header"
    transport: dict = field(default_factory=dict)
    episode: tuple[str, Qos] | None = None  # (topic, QoS) of the robot's episode count, std_msgs/UInt32

    @property
    def subscriptions(self) -> dict[str, tuple[str, Qos]]:
        """Every topic the robot link subscribes to: the observation's and the episode count's."""
        if self.episode is None:
            return dict(self.topics)
        return {**self.topics, self.episode[0]: (EPISODE_TYPE, self.episode[1])}

    @property
    def measured_topics(self) -> list[str]:
        """The topics the observation waits for and whose stamps date it (command inputs are neither)."""
        inputs = {s.topic for s in self.observation if s.kind == "command"}
        return [topic for topic in self.topics if topic not in inputs]


# ------------------------------------------------------------------------------------------------ parsing


def _bounds(entry: dict, key: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    low = np.broadcast_to(numbers_of(entry.get("low", -math.inf), f"{key}.low", "low"), (size,)).astype(np.float64)
    high = np.broadcast_to(numbers_of(entry.get("high", math.inf), f"{key}.high", "high"), (size,)).astype(np.float64)
    if not np.all(low <= high):
        raise fail(key, f"low {low.tolist()} must not exceed high {high.tolist()}")
    return low, high


def _special(entry: dict, i: int, topics: dict, inputs: set, action_dim: int) -> Selection:
    """``{source: last_action}`` or ``{input: command, ...}`` (module doc)."""
    key = f"robot.observation[{i}]"
    if "source" in entry:
        extra = sorted(set(entry) - {"source", "transform"})
        if extra:
            raise fail(key, f"a source entry takes source and transform, not {extra[0]!r}")
        if entry["source"] != "last_action":
            raise fail(f"{key}.source", f"{entry['source']!r} is not allowed; allowed: last_action")
        raw = entry.get("transform", "identity")
        transforms, size = transforms_of(raw, f"{key}.transform", "last_action", action_dim)
        return Selection("", "", "", (), (), transforms, size, key, kind="last_action")
    allowed = {"input", "topic", "type", "fields", "low", "high", "hold_s", "transform", "qos"}
    if set(entry) - allowed:
        raise fail(key, f"unknown key {sorted(set(entry) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    if entry["input"] != "command":
        raise fail(f"{key}.input", f"{entry['input']!r} is not allowed; allowed: command")
    try:
        topic = check_topic_name(entry.get("topic"))
        full = full_type_name(entry.get("type", "geometry_msgs/Twist"))
    except MessageTypeError as error:
        raise fail(key, str(error)) from None
    if full not in TOPIC_TYPES:
        raise fail(f"{key}.type", f"{entry.get('type')!r} is not a topic type")
    if topic in topics:
        raise fail(f"{key}.topic", f"{topic} is in an earlier entry; a command input has a topic of its own")
    inputs.add(topic)
    fields = names_of(entry.get("fields"), f"{key}.fields", "fields")
    if not fields:
        raise fail(
            f"{key}.fields",
            f"missing: one dotted path of {short_type_name(full)} per command value, e.g. "
            "[linear.x, linear.y, angular.z]",
        )
    check_scalar_fields(full, fields, f"{key}.fields")
    hold = entry.get("hold_s", 0.5)
    if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not 0 < hold < math.inf:
        raise fail(f"{key}.hold_s", f"must be a number of seconds > 0, got {hold!r}")
    low, high = _bounds(entry, key, len(fields))
    transforms, size = transforms_of(entry.get("transform", "identity"), f"{key}.transform", "fields", len(fields))
    topics[topic] = (full, qos_of(entry.get("qos"), f"{key}.qos", Qos(*QOS_PROFILES["reliable"])))
    return Selection(
        topic,
        full,
        "",
        (),
        (),
        transforms,
        size,
        key,
        kind="command",
        fields=fields,
        hold=float(hold),
        low=low,
        high=high,
    )


def _selection(entry, i: int, topics: dict, default_qos: Qos, action_dim: int, inputs: set) -> Selection:
    key = f"robot.observation[{i}]"
    allowed = {"topic", "type", "field", "joints", "index", "transform", "qos"}
    if not isinstance(entry, dict):
        raise fail(key, f"expected a mapping with topic and field, got {entry!r}")
    if "source" in entry or "input" in entry:
        return _special(entry, i, topics, inputs, action_dim)
    if set(entry) - allowed:
        raise fail(key, f"unknown key {sorted(set(entry) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    try:
        topic = check_topic_name(entry.get("topic"))
    except MessageTypeError as error:
        raise fail(f"{key}.topic", str(error)) from None
    if "type" in entry:
        try:
            full = full_type_name(entry["type"])
        except MessageTypeError as error:
            raise fail(f"{key}.type", str(error)) from None
        if full not in TOPIC_TYPES:
            raise fail(
                f"{key}.type",
                f"{entry['type']!r} is part of a message, not a topic type; allowed: "
                f"{', '.join(short_type_name(t) for t in TOPIC_TYPES)}",
            )
        if topic in topics and topics[topic][0] != full:
            raise fail(f"{key}.type", f"{topic} is {short_type_name(topics[topic][0])} in an earlier entry")
        topics[topic] = (full, qos_of(entry.get("qos"), f"{key}.qos", topics.get(topic, (full, default_qos))[1]))
    elif topic not in topics:
        raise fail(key, f"the first entry of {topic} needs its type (e.g. type: sensor_msgs/JointState)")
    if topic in inputs:
        raise fail(f"{key}.topic", f"{topic} is a command input; a measured topic has a topic of its own")
    elif "qos" in entry:
        topics[topic] = (topics[topic][0], qos_of(entry["qos"], f"{key}.qos", topics[topic][1]))
    full = topics[topic][0]
    path = entry.get("field")
    if not isinstance(path, str) or not path:
        raise fail(
            f"{key}.field",
            f"missing: a field of {short_type_name(full)}, e.g. {next(n for n, _ in MESSAGES[full] if n != 'header')}",
        )
    try:
        size = numeric_size(full, path)
    except MessageTypeError as error:
        raise fail(f"{key}.field", str(error)) from None
    joints = names_of(entry.get("joints"), f"{key}.joints", "joints")
    index = indices_of(entry.get("index"), f"{key}.index")
    if joints and (full != "sensor_msgs/msg/JointState" or path not in ("position", "velocity", "effort")):
        raise fail(f"{key}.joints", "joints pick entries of a JointState's position, velocity or effort")
    if joints and index:
        raise fail(key, "give joints or index, not both")
    if joints or index:
        size = len(joints or index)
        if index and numeric_size(full, path) is not None and max(index) >= numeric_size(full, path):
            raise fail(f"{key}.index", f"{path} holds {numeric_size(full, path)} numbers; index {max(index)} is out")
    transforms, out = transforms_of(entry.get("transform", "identity"), f"{key}.transform", path, size)
    return Selection(topic, full, path, joints, index, transforms, out, key)


def parse_robot_map(
    section: dict | None, transport: str, obs_dim: int, action_dim: int, robot: dict | None = None
) -> RobotMap:
    """The checked map of a deploy config's ``robot`` section for ``transport`` (``ros2`` or ``zenoh``).

    ``robot`` is the export sidecar's robot block (a robot from its description), which ``observation:
    from_sidecar``, ``topics``, ``cmd_vel`` and ``command.targets`` read.

    Without a section, or with one that only sets transport options: robopt's simulated robot's topics
    (``/robopt/observation`` and ``/robopt/command``, both Float64MultiArray, and the episode count
    ``/robopt/episode``, as ``robopt sim-robot --ros2`` serves them).
    """
    section = dict(section or {})
    if "observation" not in section and "command" not in section:  # transport options only: sim-robot's topics
        section = {**DEFAULT_MAP, **section}
    allowed = {"ros2", "zenoh", "qos", "stamps", "observation", "command", "topics", "cmd_vel", "episode"}
    if set(section) - allowed:
        raise fail("robot", f"unknown key {sorted(set(section) - allowed)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    options = section.get(transport) or {}
    if not isinstance(options, dict):
        raise fail(f"robot.{transport}", f"expected a mapping of options, got {options!r}")
    stamps = section.get("stamps", "header")
    if stamps not in STAMPS:
        raise fail("robot.stamps", f"{stamps!r} is not allowed; allowed: {', '.join(STAMPS)}")
    default_qos = qos_of(section.get("qos"), "robot.qos", Qos(*QOS_PROFILES["sensor_data"]))
    entries = section.get("observation")
    if entries == "from_sidecar":
        from robopt.sim2real.sidecar_map import observation_from_sidecar

        entries = observation_from_sidecar(robot, section.get("topics"), section.get("cmd_vel"))
    elif "topics" in section or "cmd_vel" in section:
        key = "topics" if "topics" in section else "cmd_vel"
        raise fail(f"robot.{key}", "goes with observation: from_sidecar (a hand-written map names its topics)")
    if not isinstance(entries, list) or not entries:
        raise fail("robot.observation", "expected a list of entries ({topic, type, field, ...}) or from_sidecar")
    topics: dict[str, tuple[str, Qos]] = {}
    inputs: set[str] = set()
    observation = tuple(
        _selection(entry, i, topics, default_qos, action_dim, inputs) for i, entry in enumerate(entries)
    )
    sizes = [s.size for s in observation]
    if all(size is not None for size in sizes) and sum(sizes) != obs_dim:
        raise fail(
            "robot.observation",
            f"the entries give {sum(sizes)} numbers ({' + '.join(map(str, sizes))}) but the policy takes {obs_dim}",
        )
    command = parse_command(section.get("command"), action_dim, robot)
    if command.topic in topics:
        raise fail("robot.command.topic", f"{command.topic} is also an observation topic")
    episode = _episode(section.get("episode"), topics, command.topic)
    return RobotMap(dict(topics), observation, command, stamps, dict(options), episode)


def _episode(value, topics: dict, command_topic: str) -> tuple[str, Qos] | None:
    """``robot.episode``: the topic (and QoS) of the robot's episode count (module doc); None without one."""
    if value is None:
        return None
    key = "robot.episode"
    if not isinstance(value, dict) or set(value) - {"topic", "type", "qos"}:
        raise fail(key, f"expected {{topic, type: std_msgs/UInt32, qos}}, got {value!r}")
    try:
        topic = check_topic_name(value.get("topic"))
        full = full_type_name(value.get("type", EPISODE_TYPE))
    except MessageTypeError as error:
        raise fail(key, str(error)) from None
    if full != EPISODE_TYPE:
        raise fail(f"{key}.type", f"{value.get('type')!r} is not allowed; allowed: std_msgs/UInt32 (the episode count)")
    if topic in topics or topic == command_topic:
        raise fail(f"{key}.topic", f"{topic} is also an observation or command topic; the episode count has its own")
    return topic, qos_of(value.get("qos"), f"{key}.qos", Qos(*QOS_PROFILES["reliable"]))


DEFAULT_MAP = {
    "qos": "reliable",
    "observation": [{"topic": "/robopt/observation", "type": "std_msgs/Float64MultiArray", "field": "data"}],
    "command": {"topic": "/robopt/command", "type": "std_msgs/Float64MultiArray"},
    "episode": {"topic": "/robopt/episode"},
}
"""The topics of ``robopt sim-robot --ros2/--zenoh``: the observation vector, the action vector, the episode count."""
