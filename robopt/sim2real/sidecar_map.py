"""The deploy map of a robot from its description, built from the export sidecar's ``robot`` block.

Torch-free (stdlib). ``observation: from_sidecar`` in a deploy config's ``robot`` section becomes the entries of
``robopt.sim2real.ros_map``, one per observation term of the policy, in the policy's order, each with the scale
and clip it was trained with (never its noise). Where each term comes from is the term's own declaration (its
``deploy`` source, written into the sidecar by the export; ``robopt.envs.robot.terms.Deploy``): a topic's message
field (a joint array picked by the policy's joint names, minus the default pose where it says so; an IMU
orientation turned into gravity in the base frame), a value the runtime holds (``last_action``), or the command
input. The built-in terms map so::

    base_lin_vel       nav_msgs/Odometry   twist.twist.linear  (the state estimator's velocity, in the base frame)
    base_ang_vel       sensor_msgs/Imu     angular_velocity
    projected_gravity  sensor_msgs/Imu     orientation -> gravity in the base frame
    joint_pos          sensor_msgs/JointState position, the policy's joints by name, minus the default pose
    joint_vel          sensor_msgs/JointState velocity, by name
    last_action        the runtime's last action
    velocity_command   geometry_msgs/Twist on cmd_vel: linear.x, linear.y, angular.z, clamped into the trained
                       command ranges (or narrower ones in ``cmd_vel.ranges``), held ``cmd_vel.hold_s``

A topic is ``/<key>`` unless ``topics`` renames it (``{joint_states: /my/joints, imu: ..., cmd_vel: ...}``: the keys
the policy's terms use). A term with no deploy source (feet contacts, joint torques), a command without one (a
pose target), a ``cmd_vel`` section for a policy without a command input, or ranges wider than the trained ones are
one-line ConfigErrors. A policy that sees a window of past steps gets it from the runtime (the sidecar's
``history``): the map builds one step's observation.
"""

from __future__ import annotations

from robopt.options import ConfigError

__all__ = ["observation_from_sidecar"]


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


def _topics(terms: list[dict], command: dict | None, topics: dict | None) -> dict[str, str]:
    """Each topic key the policy's sources use -> its topic: ``/<key>``, or the name ``topics`` gives it."""
    keys = {term["deploy"]["topic"] for term in terms if (term.get("deploy") or {}).get("topic")}
    if any((term.get("deploy") or {}).get("command") for term in terms) and (command or {}).get("deploy"):
        keys.add(command["deploy"]["topic"])
    names = {key: f"/{key}" for key in sorted(keys)}
    if topics is not None:
        unknown = sorted(set(topics) - set(names)) if isinstance(topics, dict) else [topics]
        if unknown:
            raise ConfigError(
                f"robot.topics: unknown key {unknown[0]!r}; this policy's sources use: {', '.join(names) or '(none)'}"
            )
        names.update(topics)
    return names


def observation_from_sidecar(robot: dict | None, topics: dict | None, cmd_vel: dict | None) -> list[dict]:
    """The ``robot.observation`` entries for a policy whose sidecar ``robot`` block is ``robot`` (module doc)."""
    if not robot:
        raise ConfigError(
            "robot.observation: from_sidecar needs a policy of a robot from its description (env.id: "
            "robot); this export's policy.json has no robot block"
        )
    observation = robot.get("observation") or {}
    terms = observation.get("terms") or []
    command = robot.get("command")
    has_command = any((term.get("deploy") or {}).get("command") for term in terms)
    if cmd_vel is not None and not has_command:
        listed = ", ".join(t["name"] for t in terms)
        raise ConfigError(
            f"robot.cmd_vel: this policy has no velocity command input (its observation terms: "
            f"{listed}); a Twist command topic has nothing to feed"
        )
    names = _topics(terms, command, topics)
    typed: set[str] = set()  # a topic's message type is given on its first entry
    entries = []
    for term in terms:
        if "deploy" not in term:
            raise ConfigError(
                "robot.observation: this policy.json was written before the sidecar carried each term's "
                "deploy source; export the run again (robopt export RUN --force)"
            )
        deploy = term["deploy"]
        if not deploy:
            raise ConfigError(
                f"robot.observation: the policy's term {term['name']!r} has no ROS 2 source (its "
                "declaration names no deploy source); write robot.observation by hand "
                "(docs/ros2.md)"
            )
        steps_args = ([float(v) for v in term["scale"]], term.get("clip"))
        if deploy.get("command"):
            entries.append(_command(command, names, cmd_vel or {}, *steps_args))
        elif deploy.get("runtime"):
            entries.append({"source": deploy["runtime"], "transform": _transform(_scaled(*steps_args))})
        else:
            entries.append(_topic_entry(deploy, names, typed, robot, *steps_args))
    return entries


def _topic_entry(deploy: dict, names: dict, typed: set, robot: dict, scale: list[float], clip) -> dict:
    """A term read from a field of a topic's messages (by the policy's joint names where the field is per joint)."""
    topic = names[deploy["topic"]]
    entry = {"topic": topic, "field": deploy["field"]}
    if topic not in typed:
        entry["type"] = deploy["type"]
        typed.add(topic)
    if deploy.get("by_joint"):
        entry["joints"] = list(robot["joint_names"])
    offset = None
    if deploy.get("offset") == "default_pose":
        offset = [-float(v) for v in robot["default_pose"]]
    elif deploy.get("offset"):
        raise ConfigError(f"robot.observation: unknown deploy offset {deploy['offset']!r} (allowed: default_pose)")
    entry["transform"] = _transform(_scaled(scale, clip, offset), deploy.get("convert") or None)
    return entry


def _command(command: dict | None, names: dict, options: dict, scale: list[float], clip) -> dict:
    """The command input: the command kind's message and fields, clamped into the trained (or narrower) ranges."""
    if not command or not command.get("deploy"):
        kind = (command or {}).get("type", "none recorded")
        raise ConfigError(
            f"robot.observation: the policy observes a command (type {kind}) but its sidecar records no "
            "message a robot computer receives it in; write robot.observation by hand"
        )
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
                raise ConfigError(
                    f"robot.cmd_vel.ranges.{key}: [{value[0]}, {value[1]}] is wider than the trained "
                    f"[{lo}, {hi}]; a policy is untested outside its command ranges"
                )
            lo, hi = float(value[0]), float(value[1])
        low.append(lo)
        high.append(hi)
    deploy = command["deploy"]
    entry = {"input": "command", "topic": names[deploy["topic"]], "type": deploy["type"],
             "fields": [deploy["fields"][key] for key in command["names"]], "low": low, "high": high,
             "transform": _transform(_scaled(scale, clip))}  # fmt: skip
    for key in ("hold_s", "qos"):
        if key in options:
            entry[key] = options[key]
    return entry
