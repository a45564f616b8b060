"""The deploy map of a robot from its description, built from the export sidecar's ``robot`` block.

Torch-free (stdlib). ``observation: from_sidecar`` in a deploy config's ``robot`` section becomes the entries of
``robopt.sim2real.ros_map``, one per observation term of the policy, in the policy's order, each with the scale
and clip it was trained with (never its noise)::

    base_lin_vel       nav_msgs/Odometry   twist.twist.linear  (the state estimator's velocity, in the base frame)
    base_ang_vel       sensor_msgs/Imu     angular_velocity
    projected_gravity  sensor_msgs/Imu     orientation -> gravity in the base frame
    joint_pos          sensor_msgs/JointState position, the policy's joints by name, minus the default pose
    joint_vel          sensor_msgs/JointState velocity, by name
    last_action        the runtime's last action
    velocity_command   geometry_msgs/Twist on cmd_vel: linear.x, linear.y, angular.z, clamped into the trained
                       command ranges (or narrower ones in ``cmd_vel.ranges``), held ``cmd_vel.hold_s``

``topics`` renames them (``{joint_states, imu, odom, cmd_vel}``; defaults ``/joint_states``, ``/imu``, ``/odom``,
``/cmd_vel``). A term with no such source (feet contacts, joint torques, a pose command), an observation history
(the runtime keeps no window yet), a ``cmd_vel`` section for a policy without a velocity command, or ranges wider
than the trained ones are one-line ConfigErrors.
"""

from __future__ import annotations

from robopt.options import ConfigError

__all__ = ["DEFAULT_TOPICS", "TWIST_FIELDS", "observation_from_sidecar"]

DEFAULT_TOPICS = {"joint_states": "/joint_states", "imu": "/imu", "odom": "/odom", "cmd_vel": "/cmd_vel"}
TWIST_FIELDS = {"lin_vel_x": "linear.x", "lin_vel_y": "linear.y", "ang_vel_z": "angular.z"}
SOURCES = ("base_lin_vel", "base_ang_vel", "projected_gravity", "joint_pos", "joint_vel", "last_action",
           "velocity_command")  # fmt: skip


def _scaled(scale: list[float], clip: float | None, offset: list[float] | None = None) -> list:
    """A pipeline: scale * (x + offset), then clip."""
    steps: list = []
    if offset is not None:
        steps.append({"offset": offset})
    if any(s != 1.0 for s in scale):
        steps.append({"scale": scale})
    if clip is not None:
        steps.append({"clip": clip})
    return steps


def _transform(steps: list, first: str | None = None):
    steps = ([first] if first else []) + steps
    if not steps:
        return "identity"
    return steps[0] if len(steps) == 1 else [steps]


def observation_from_sidecar(robot: dict | None, topics: dict | None, cmd_vel: dict | None) -> list[dict]:
    """The ``robot.observation`` entries for a policy whose sidecar ``robot`` block is ``robot`` (module doc)."""
    if not robot:
        raise ConfigError("robot.observation: from_sidecar needs a policy of a robot from its description (env.id: "
                          "robot); this export's policy.json has no robot block")  # fmt: skip
    names = dict(DEFAULT_TOPICS)
    if topics is not None:
        if not isinstance(topics, dict) or set(topics) - set(DEFAULT_TOPICS):
            unknown = sorted(set(topics) - set(DEFAULT_TOPICS)) if isinstance(topics, dict) else [topics]
            raise ConfigError(f"robot.topics: unknown key {unknown[0]!r}; allowed: {', '.join(DEFAULT_TOPICS)}")
        names.update(topics)
    observation = robot.get("observation") or {}
    if int(observation.get("history", 1)) > 1:
        raise ConfigError(f"robot.observation: the policy observes a history of {observation['history']} frames; "
                          "the deploy runtime does not keep observation windows yet: write no from_sidecar map for "
                          "it")  # fmt: skip
    terms = observation.get("terms") or []
    joints = list(robot["joint_names"])
    default = [float(v) for v in robot["default_pose"]]
    command = robot.get("command")
    has_velocity = any(term["name"] == "velocity_command" for term in terms)
    if cmd_vel is not None and not has_velocity:
        listed = ", ".join(t["name"] for t in terms)
        raise ConfigError(f"robot.cmd_vel: this policy has no velocity command input (its observation terms: "
                          f"{listed}); a Twist command topic has nothing to feed")  # fmt: skip
    entries: list[dict] = []
    joint_states_typed = imu_typed = False
    for term in terms:
        name, scale, clip = term["name"], [float(v) for v in term["scale"]], term.get("clip")
        if name not in SOURCES:
            raise ConfigError(f"robot.observation: the policy's term {name!r} has no ROS 2 source in the from_sidecar "
                              f"map (it maps {', '.join(SOURCES)}); write robot.observation by hand "
                              "(docs/ros2.md)")  # fmt: skip
        if name in ("joint_pos", "joint_vel"):
            entry = {"topic": names["joint_states"], "field": "position" if name == "joint_pos" else "velocity",
                     "joints": joints}  # fmt: skip
            if not joint_states_typed:
                entry["type"], joint_states_typed = "sensor_msgs/JointState", True
            offset = [-d for d in default] if name == "joint_pos" else None
            entry["transform"] = _transform(_scaled(scale, clip, offset))
        elif name in ("base_ang_vel", "projected_gravity"):
            entry = {"topic": names["imu"], "field": "angular_velocity" if name == "base_ang_vel" else "orientation"}
            if not imu_typed:
                entry["type"], imu_typed = "sensor_msgs/Imu", True
            first = "gravity" if name == "projected_gravity" else None
            entry["transform"] = _transform(_scaled(scale, clip), first)
        elif name == "base_lin_vel":
            entry = {"topic": names["odom"], "type": "nav_msgs/Odometry", "field": "twist.twist.linear",
                     "transform": _transform(_scaled(scale, clip))}  # fmt: skip
        elif name == "last_action":
            entry = {"source": "last_action", "transform": _transform(_scaled(scale, clip))}
        else:
            entry = _velocity_command(command, names["cmd_vel"], cmd_vel or {}, scale, clip)
        entries.append(entry)
    return entries


def _velocity_command(command: dict | None, topic: str, options: dict, scale: list[float], clip) -> dict:
    if not command or command.get("type") != "velocity":
        raise ConfigError("robot.observation: the policy observes a velocity command but its sidecar records no "
                          "velocity command ranges")  # fmt: skip
    if not isinstance(options, dict) or set(options) - {"hold_s", "ranges", "qos"}:
        unknown = sorted(set(options) - {"hold_s", "ranges", "qos"}) if isinstance(options, dict) else [options]
        raise ConfigError(f"robot.cmd_vel: unknown key {unknown[0]!r}; allowed: hold_s, qos, ranges")
    trained = command["ranges"]
    ranges = options.get("ranges") or {}
    if not isinstance(ranges, dict) or set(ranges) - set(trained):
        unknown = sorted(set(ranges) - set(trained)) if isinstance(ranges, dict) else [ranges]
        raise ConfigError(f"robot.cmd_vel.ranges: unknown key {unknown[0]!r}; allowed: {', '.join(trained)}")
    low, high = [], []
    for key in command["names"]:
        lo, hi = trained[key]
        if key in ranges:
            value = ranges[key]
            ok = isinstance(value, (list, tuple)) and len(value) == 2
            ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            if not ok or value[0] > value[1]:
                raise ConfigError(f"robot.cmd_vel.ranges.{key}: expected [low, high], got {value!r}")
            if value[0] < lo or value[1] > hi:
                raise ConfigError(f"robot.cmd_vel.ranges.{key}: [{value[0]}, {value[1]}] is wider than the trained "
                                  f"[{lo}, {hi}]; a policy is untested outside its command ranges")  # fmt: skip
            lo, hi = float(value[0]), float(value[1])
        low.append(lo)
        high.append(hi)
    entry = {"input": "command", "topic": topic, "type": "geometry_msgs/Twist",
             "fields": [TWIST_FIELDS[key] for key in command["names"]], "low": low, "high": high,
             "transform": _transform(_scaled(scale, clip))}  # fmt: skip
    for key in ("hold_s", "qos"):
        if key in options:
            entry[key] = options[key]
    return entry
