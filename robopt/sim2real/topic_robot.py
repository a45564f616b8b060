"""A robot behind topics (ROS 2 over DDS, or Zenoh): the observation from the latest messages, the action out.

Torch-free (numpy, stdlib). Shapes: D obs dim, A action dim. ``TopicRobot`` is the ``RobotInterface`` shared by the
transports; a transport (``robopt.sim2real.ros2``, ``robopt.sim2real.zenoh_link``) only moves CDR payloads: it
subscribes to the map's topics, hands over ``(topic, payload, receive time)`` when polled, and publishes the
command payload.

``read()`` decodes the newest payload of each topic (``robopt.sim2real.cdr``) and builds the observation from the
map's entries (``robopt.sim2real.ros_map``). Its time is the oldest of the topics' measurement times: a topic's
header stamp (ROS time, wall clock), moved onto this process's monotonic clock, or the receive time for a message
without a header or with ``stamps: receive``; the safety layer then judges staleness and stamps from the future.
Every message is decoded and its entries computed when it arrives; nothing raises on bad data: a malformed payload,
a NaN or Inf, an array of the wrong length, a JointState without a configured joint are counted, one count per
message, and dropped (the topic's previous good message stays, and ages); a topic that never published a good
message leaves ``read()`` at (None, nan), so the loop sends the safe action. One-line notices say what is wrong
once (``take_notices()``: the deploy command prints them): a silent topic, an unknown joint with the names that
exist, a command topic without a subscriber, a QoS mismatch.

Two entries are not measurements: ``last_action`` is the action ``send`` got last (zero at start and again at each
episode boundary the robot reports, as the env's term is after a reset; on a tick without a fresh measurement it is
the safe action the runtime sent, which is what the robot was given), and a command
input (``/cmd_vel``) is clamped into its bounds when it arrives (``command_clamped``), held ``hold_s`` on this
process's clock and zero before its first message and after that (one notice each time it goes quiet); neither
dates the observation nor holds ``read()`` back. A ``targets`` command orders the values by the message's joints.

With the map's ``episode`` topic (std_msgs/UInt32, the robot's count of episodes started), ``episodes_started``
counts the changes of that number seen up to the latest ``read()`` (its first message sets the baseline), so the
control loop resets a policy with memory at the robot's episode boundary; without one it is None (no boundaries
reported). The topics are independent: a boundary lands within the tick of the observation that begins the episode
only when the robot publishes the count with (or before) that observation, as ``robopt sim-robot`` does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from robopt.sim2real import cdr
from robopt.sim2real.ros_fields import flatten, get_field
from robopt.sim2real.ros_map import EPISODE_TYPE, CommandMap, RobotMap, Selection
from robopt.sim2real.transport import Notices, Transport

SILENT_NOTICE_S = 1.0  # a topic with no message this long after start gets a notice


def wall_to_monotonic(stamp: float, wall_now: float, monotonic_now: float) -> float:
    """A wall-clock time (ROS header stamp) on this process's monotonic clock."""
    return monotonic_now - (wall_now - stamp)


class TopicRobot:
    """``RobotInterface`` over a ``Transport`` and a ``RobotMap`` (module doc)."""

    def __init__(
        self,
        transport: Transport,
        mapping: RobotMap,
        obs_dim: int,
        action_dim: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.transport, self.map, self.obs_dim, self.action_dim = transport, mapping, obs_dim, action_dim
        self.clock, self.wall_clock = clock, wall_clock
        self.episode_returns: list[float] = []
        self._counters = {"malformed": 0, "nonfinite": 0, "wrong_length": 0, "unknown_joint": 0, "waiting": 0,
                          "send_failed": 0, "messages": 0, "command_clamped": 0, "command_quiet": 0,
                          "episodes": 0, "no_measurement": 0}  # fmt: skip
        self._measured = mapping.measured_topics
        self._last_action = np.zeros(action_dim)  # [A] what send() got last
        self._last_obs: np.ndarray | None = None  # [D] the newest observation read (a delta policy's targets)
        self._quiet: set[int] = set()  # command inputs that are zero now because their topic went quiet
        # topic -> the entries' vectors from its newest good message, and that message's measurement time
        self._latest: dict[str, tuple[dict[int, np.ndarray], float]] = {}
        self._entries: dict[str, list[tuple[int, Selection]]] = {}
        for i, selection in enumerate(mapping.observation):
            self._entries.setdefault(selection.topic, []).append((i, selection))
        self.notices = Notices()
        self._start = clock()
        self._episode_topic = mapping.episode[0] if mapping.episode is not None else None
        self._episode_count: int | None = None  # the robot's latest episode count (None before its first message)

    @property
    def counters(self) -> dict[str, int]:
        return {**self._counters, **self.transport.counters}

    @property
    def episodes_started(self) -> int | None:
        """Changes of the robot's episode count seen so far (only ``read`` takes messages in: as of the latest read);
        None without an episode topic."""
        return None if self._episode_topic is None else self._counters["episodes"]

    def take_notices(self) -> list[str]:
        return self.notices.take() + self.transport.take_notices()

    # ------------------------------------------------------------------------------------------------ read

    def _measurement_time(self, message: dict, received: float) -> float:
        header = message.get("header")
        if self.map.stamps == "receive" or not isinstance(header, dict):
            return received
        stamp = header["stamp"]
        seconds = float(stamp["sec"]) + float(stamp["nanosec"]) * 1e-9
        if seconds == 0.0:  # an unset stamp (a driver that fills none): the receive time
            return received
        return wall_to_monotonic(seconds, self.wall_clock(), self.clock())

    def _accept(self, topic: str, payload: bytes, received: float) -> None:
        """Decode one message and compute its entries' vectors; a message any entry cannot use is counted (by the
        first reason) and dropped, so the topic keeps its previous good message."""
        full = self.map.topics[topic][0]
        try:
            message = cdr.decode(full, payload)
        except cdr.CdrError:
            self._counters["malformed"] += 1
            return
        parts = {}
        for i, selection in self._entries.get(topic, ()):
            if selection.kind == "command":  # clamped now, held and transformed at read time
                part = self._command_input(selection, message)
                if part is None:
                    return
                parts[i] = part
                continue
            try:
                part = self._select(selection, message)
            except (ValueError, KeyError, IndexError, TypeError, FloatingPointError):  # a hook that failed on it
                self._counters["malformed"] += 1
                return
            if part is None:  # counted by _select
                return
            if not np.all(np.isfinite(part)):
                self._counters["nonfinite"] += 1
                return
            parts[i] = part
        self._latest[topic] = (parts, self._measurement_time(message, received))
        self._counters["messages"] += 1

    def _accept_episode(self, payload: bytes) -> None:
        """The robot's episode count: each change is one boundary (the control loop resets once per read in which
        the count moved, however many changes arrived since the last)."""
        try:
            count = int(cdr.decode(EPISODE_TYPE, payload)["data"])
        except (cdr.CdrError, KeyError, TypeError, ValueError):
            self._counters["malformed"] += 1
            return
        if self._episode_count is not None and count != self._episode_count:
            self._counters["episodes"] += 1
            # a reset robot starts as the env's episode does, with no previous action: the last gait's action fed
            # back as ``last_action`` would tell the policy it was mid-stride
            self._last_action = np.zeros_like(self._last_action)
        self._episode_count = count

    def _command_input(self, selection: Selection, message: dict) -> np.ndarray | None:
        try:
            raw = np.array([float(get_field(message, path)) for path in selection.fields])
        except (ValueError, KeyError, TypeError):
            self._counters["malformed"] += 1
            return None
        if not np.all(np.isfinite(raw)):
            self._counters["nonfinite"] += 1
            return None
        clamped = np.clip(raw, selection.low, selection.high)
        if not np.array_equal(clamped, raw):
            self._counters["command_clamped"] += 1
            self.notices.once(
                f"clamped:{selection.topic}",
                f"{selection.key}: {selection.topic} asked for "
                f"{raw.tolist()}, outside the trained range [{selection.low.tolist()}, "
                f"{selection.high.tolist()}]: clamped (counted command_clamped)",
            )
        return clamped

    def _held_command(self, i: int, selection: Selection) -> np.ndarray:
        """The command input's value now: its last message's within ``hold`` seconds of arrival, else zero."""
        latest = self._latest.get(selection.topic)
        now = self.clock()
        if latest is not None and now - latest[1] <= selection.hold:
            self._quiet.discard(i)
            raw = latest[0][i]
        else:
            if latest is not None and i not in self._quiet:
                self._quiet.add(i)
                self._counters["command_quiet"] += 1
                self.notices.once(
                    f"quiet:{selection.topic}:{self._counters['command_quiet']}",
                    f"{selection.topic} quiet for {selection.hold:g} s: command zero until it speaks again",
                )
            raw = np.zeros(len(selection.fields))
        parts = [np.asarray(transform(raw), dtype=np.float64).reshape(-1) for transform in selection.transforms]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _select(self, selection: Selection, message: dict) -> np.ndarray | None:
        value = get_field(message, selection.field)
        vector = flatten(value)
        if selection.joints:
            names = message["name"]
            positions = []
            for joint in selection.joints:
                if joint not in names:
                    self._counters["unknown_joint"] += 1
                    shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
                    line = (
                        f"{selection.key}: {selection.topic} has no joint {joint!r}; its names are: {shown or '(none)'}"
                    )
                    self.notices.once(f"joint:{selection.topic}:{joint}", line)
                    return None
                positions.append(names.index(joint))
            if len(vector) != len(names):
                self._counters["wrong_length"] += 1
                return None
            vector = vector[positions]
        elif selection.index:
            if max(selection.index) >= len(vector):
                self._counters["wrong_length"] += 1
                return None
            vector = vector[list(selection.index)]
        with np.errstate(all="ignore"):  # cos(inf) and the like are NaN, which read() counts as nonfinite
            parts = [np.asarray(transform(vector), dtype=np.float64).reshape(-1) for transform in selection.transforms]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def read(self) -> tuple[np.ndarray | None, float]:
        try:
            arrived = self.transport.poll()
        except Exception:  # a transport that broke mid-run: no new messages this tick
            arrived = []
            self._counters["malformed"] += 1
        for topic, payload, received in arrived:  # in arrival order: the newest good message of a topic wins
            if topic in self.map.topics:
                self._accept(topic, payload, received)
            elif topic == self._episode_topic:
                self._accept_episode(payload)
        missing = [topic for topic in self._measured if topic not in self._latest]
        if missing:
            self._counters["waiting"] += 1
            if self.clock() - self._start > SILENT_NOTICE_S:
                for topic in missing:
                    self.notices.once(
                        f"silent:{topic}",
                        f"waiting for {topic}: no valid message yet (the safe action "
                        "is sent until every observation topic has published)",
                    )
            return None, math.nan
        parts, oldest = [], math.inf
        for i, selection in enumerate(self.map.observation):
            if selection.kind == "last_action":
                transforms = selection.transforms
                values = [np.asarray(t(self._last_action), dtype=np.float64).reshape(-1) for t in transforms]
                parts.append(values[0] if len(values) == 1 else np.concatenate(values))
                continue
            if selection.kind == "command":
                parts.append(self._held_command(i, selection))
                continue
            vectors, measured = self._latest[selection.topic]
            parts.append(vectors[i])
            oldest = min(oldest, measured)
        obs = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        if obs.shape != (self.obs_dim,):  # sequences whose length the config could not know
            self._counters["wrong_length"] += 1
            line = f"robot.observation: the messages give {obs.size} numbers but the policy takes {self.obs_dim}"
            self.notices.once("obs_size", line)
            return None, math.nan
        self._last_obs = obs
        return obs, oldest

    # ------------------------------------------------------------------------------------------------ send

    def command_message(self, action: np.ndarray) -> dict:
        """The command message for ``action`` [A] (scale * action + offset in the map's field)."""
        command: CommandMap = self.map.command
        values = np.asarray(action, dtype=np.float64).reshape(-1) * command.scale + command.offset
        if command.measured is not None:  # a delta policy: measured position + scale * action (a gripper: absolute)
            measured = command.measured(self._last_obs)  # [A] (send() holds a delta command until a measurement)
            values = np.where(np.isnan(measured), values, measured + values - command.offset)
        if command.order:  # targets: the message lists the joints in its own order
            values = values[list(command.order)]
        if command.type == "std_msgs/msg/Float64MultiArray":
            return {"data": values}
        if command.type == "sensor_msgs/msg/JointState":
            now = self.wall_clock()
            stamp = {"sec": int(now), "nanosec": int((now % 1.0) * 1e9)}
            return {"header": {"stamp": stamp}, "name": list(command.joints), command.field: values}
        message: dict = {"linear": {}, "angular": {}}
        for path, value in zip(command.fields, values):
            group, axis = path.split(".")
            message[group][axis] = float(value)
        return message

    def send(self, action: np.ndarray) -> None:
        if self.map.command.measured is not None and self._last_obs is None:
            self._counters["no_measurement"] += 1  # delta targets before any measurement: nothing to add the step to
            return
        try:
            self._last_action = np.asarray(action, dtype=np.float64).reshape(-1).copy()
            payload = cdr.encode(self.map.command.type, self.command_message(action))
            ok = self.transport.publish(self.map.command.topic, payload)
        except Exception:
            ok = False
        if not ok:
            self._counters["send_failed"] += 1

    def close(self) -> None:
        try:
            self.transport.close()
        except Exception:  # closing a broken link: nothing left to do
            pass
