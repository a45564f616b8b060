"""``robopt sim-robot ENV_ID --ros2`` / ``--zenoh``: a simulated robot served as ROS 2 topics (torch, the simulators).

Every ``period`` the env steps with the latest command and the robot publishes what it measured:
    ``/joint_states``        sensor_msgs/JointState, stamped with the wall-clock time of the measurement. The joints
                             are the env's where robopt knows them (Pendulum-v1: ``hinge``, position the angle
                             atan2(sin, cos) of the observation, velocity its rate), else ``obs_0`` ... ``obs_{D-1}``
                             holding the observation as positions.
    ``/robopt/observation``  std_msgs/Float64MultiArray, the observation vector (the default deploy map's input).
    ``/robopt/episode``      std_msgs/UInt32, the number of episodes started after the first, published before the
                             other topics of each period (the default deploy map's ``episode``: a runtime resets a
                             policy with memory when it changes).
and takes ``std_msgs/Float64MultiArray`` commands on ``--command-topic`` (``/robopt/command``; ros2_control's
forward command controllers take the same message on ``/<controller>/commands``), clipped into the action bounds.
A robot from its description (a config or run directory with ``env.id: robot``) publishes ``/joint_states`` by
joint name, ``/imu`` and ``/odom`` instead and takes joint position targets in radians
(``robopt.sim2real.robot_topics``) on ``/joint_group_position_controller/commands`` by default, where the shipped
ROS 2 deploy configs send them (a ros2_control forward position controller's topic); ``cmd_vel_topic`` scores a
Twist command against its body velocity.

As the UDP server (``robopt.sim2real.server``): it waits for the first command before it steps (publishing the
reset observation every period, so a deploy runtime sees the robot and starts), every message in either direction
is lost with probability ``loss`` and delayed by ``latency_ms``, and after ``command_timeout`` without a command
the env steps with zero action (counted ``command_timeout``). Malformed commands are dropped and counted.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from robopt.sim2real import cdr
from robopt.sim2real.serving import COMMAND_TIMEOUT_PERIODS, ServeResult, check_number, env_period, run_deadline
from robopt.sim2real.transport import Qos

JOINT_STATES, OBSERVATION, COMMAND = "/joint_states", "/robopt/observation", "/robopt/command"
# A robot from its description takes joint position targets where a ros2_control forward position controller would,
# the topic configs/deploy/quadruped_ros2.yaml (and any ros2_control deploy) sends them to.
ROBOT_COMMAND = "/joint_group_position_controller/commands"
EPISODE, UINT32 = "/robopt/episode", "std_msgs/msg/UInt32"
JOINT_STATE, FLOAT64_ARRAY = "sensor_msgs/msg/JointState", "std_msgs/msg/Float64MultiArray"
TWIST = "geometry_msgs/msg/Twist"


def pendulum_joints(obs: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Pendulum-v1's observation (cos q, sin q, dq) as its one joint ``hinge``: position q, velocity dq."""
    return ["hinge"], np.array([math.atan2(obs[1], obs[0])]), np.array([obs[2]])


JOINT_VIEWS: dict[str, Callable[[np.ndarray], tuple[list[str], np.ndarray, np.ndarray]]] = {
    "Pendulum-v1": pendulum_joints,
}
"""Env id -> the joints of its observation (names, positions, velocities), for /joint_states."""


def joint_state(env_id: str, obs: np.ndarray, wall_time: float) -> dict:
    view = JOINT_VIEWS.get(env_id)
    if view is not None:
        names, position, velocity = view(obs)
    else:
        names, position, velocity = [f"obs_{i}" for i in range(obs.size)], obs, np.zeros(0)
    stamp = {"sec": int(wall_time), "nanosec": min(int((wall_time % 1.0) * 1e9), 999_999_999)}
    return {"header": {"stamp": stamp, "frame_id": "base"}, "name": names, "position": position, "velocity": velocity}


class TopicSimRobotServer:
    """The env and its link (``ros2`` or ``zenoh``), built at construction; ``run`` serves."""

    def __init__(
        self,
        env_id: str,
        transport: str = "ros2",
        *,
        domain_id: int = 0,
        interface: str | None = None,
        peers: list[str] | None = None,
        zenoh_options: dict | None = None,
        endpoint: str = "",
        command_topic: str | None = None,
        period: float | None = None,
        latency_ms: float = 0.0,
        loss: float = 0.0,
        seed: int = 0,
        command_timeout_ms: float | None = None,
        log: Callable[[str], None] | None = None,
        cmd_vel_topic: str | None = None,
    ) -> None:
        from robopt.sim2real.ros_messages import check_topic_name

        check_number("--period", period, 0.0, low_open=True)
        check_number("--command-timeout-ms", command_timeout_ms, 0.0)
        check_number("--latency-ms", latency_ms, 0.0)
        check_number("--loss", loss, 0.0, 0.999)
        if command_topic is not None:
            check_topic_name(command_topic)
        if cmd_vel_topic is not None:
            check_topic_name(cmd_vel_topic)
        if transport not in ("ros2", "zenoh"):
            raise ValueError(f"transport must be ros2 or zenoh, got {transport!r}")
        self.log = log or (lambda line: print(line, flush=True))
        self.latency, self.loss, self.rng = latency_ms / 1000.0, loss, np.random.default_rng(seed)
        self.env_id, self.seed, self.transport = env_id, seed, transport
        from robopt.sim2real.serving import make_sim_env  # torch and the simulators: only when serving a sim

        self.env = make_sim_env(env_id)
        try:
            from robopt.sim2real.robot_topics import RobotTopics, is_robot_env

            self.view = RobotTopics(self.env) if is_robot_env(self.env) else None
            if command_topic is None:  # where the shipped deploy configs send: the default deploy map's, ros2_control's
                command_topic = COMMAND if self.view is None else ROBOT_COMMAND
            self.command_topic = command_topic
            if cmd_vel_topic is not None and self.view is None:
                raise ValueError(
                    f"--cmd-vel scores a velocity command on a robot from its description; {env_id} is "
                    "not one (give a config or run directory with env.id: robot)"
                )
            self.cmd_vel_topic = cmd_vel_topic
            self.period = env_period(self.env) if period is None else float(period)
            timeout = COMMAND_TIMEOUT_PERIODS * self.period if command_timeout_ms is None else command_timeout_ms / 1e3
            self.command_timeout = timeout
            self.low = self.env.action_low.cpu().numpy().astype(np.float64)
            self.high = self.env.action_high.cpu().numpy().astype(np.float64)
            subscriptions = {command_topic: (FLOAT64_ARRAY, Qos("reliable", 10))}
            if cmd_vel_topic is not None:
                subscriptions[cmd_vel_topic] = (TWIST, Qos("reliable", 10))
            publications = {JOINT_STATES: (JOINT_STATE, Qos("best_effort", 5)),
                            OBSERVATION: (FLOAT64_ARRAY, Qos("reliable", 10)),
                            EPISODE: (UINT32, Qos("reliable", 10))}  # fmt: skip
            if self.view is not None:
                publications.update({t: (full, Qos("best_effort", 5)) for t, full in self.view.publications().items()})
            if transport == "ros2":
                from robopt.sim2real.ros2 import DdsLink, check_domain_id

                check_domain_id(domain_id, "--domain-id")
                self.link = DdsLink(subscriptions, publications, domain_id, interface=interface, peers=peers)
                self.where = f"ros2 domain {domain_id}"
            else:
                from robopt.sim2real.zenoh_link import ZenohLink

                self.link = ZenohLink(subscriptions, publications, zenoh_options, endpoint)
                options = zenoh_options or {}
                endpoints = [
                    f"connect {e}" for e in [*(options.get("connect") or []), *([endpoint] if endpoint else [])]
                ]
                endpoints += [f"listen {e}" for e in options.get("listen") or []]
                self.where = f"zenoh ({', '.join(endpoints) or 'peer discovery'})"
        except BaseException:
            self.env.close()
            raise
        self.counters: Counter[str] = Counter()
        self.action = np.zeros(self.env.action_dim)
        self.target: np.ndarray | None = None  # a delta robot's commanded joint targets [A] (rad)
        self._last_command = math.nan
        self._inbox: list = []  # heap of (due, n, payload)
        self._outbox: list = []  # heap of (due, n, topic, payload)
        self._n = 0
        self.episodes = 0  # episodes started after the first (auto-resets)

    def ready_line(self) -> str:
        timeout = f"{self.command_timeout:g} s" if self.command_timeout > 0 else "off"
        out = ", ".join([*(self.view.publications() if self.view else [JOINT_STATES]), OBSERVATION, EPISODE])
        takes = " (joint position targets, rad)" if self.view is not None else ""
        scored = f", scoring {self.cmd_vel_topic}" if self.cmd_vel_topic else ""
        return (
            f"sim-robot: {self.env_id} on {self.where}, {out} out, {self.command_topic}{takes} in{scored}, period "
            f"{self.period:g} s, obs_dim {self.env.obs_dim}, action_dim {self.env.action_dim}, command timeout "
            f"{timeout}; waiting for the first command"
        )

    def _publish(self, obs: np.ndarray) -> None:
        now_wall = time.time()
        measured = (
            self.view.messages(now_wall)
            if self.view is not None
            else [(JOINT_STATES, JOINT_STATE, joint_state(self.env_id, obs, now_wall))]
        )
        episode = (EPISODE, UINT32, {"data": self.episodes})  # first: with or before the episode's first obs
        for topic, full, message in (episode, *measured, (OBSERVATION, FLOAT64_ARRAY, {"data": obs})):
            if self.rng.random() < self.loss:
                self.counters["lost_out"] += 1
                continue
            self._n += 1
            heapq.heappush(self._outbox, (time.monotonic() + self.latency, self._n, topic, cdr.encode(full, message)))

    def _flush(self, now: float) -> None:
        while self._outbox and self._outbox[0][0] <= now:
            _, _, topic, payload = heapq.heappop(self._outbox)
            self.counters["sent" if self.link.publish(topic, payload) else "send_failed"] += 1

    def _receive(self, now: float) -> None:
        for topic, payload, _ in self.link.poll():
            if self.rng.random() < self.loss:
                self.counters["lost_in"] += 1
                continue
            self._n += 1
            heapq.heappush(self._inbox, (now + self.latency, self._n, topic, payload))
        while self._inbox and self._inbox[0][0] <= now:
            _, _, topic, payload = heapq.heappop(self._inbox)
            if topic == self.cmd_vel_topic:
                self._accept_cmd_vel(payload)
            else:
                self._accept(payload)

    def _accept_cmd_vel(self, payload: bytes) -> None:
        try:
            self.view.track(cdr.decode(TWIST, payload))
        except cdr.CdrError:
            self.counters["malformed"] += 1

    def _accept(self, payload: bytes) -> None:
        try:
            action = np.asarray(cdr.decode(FLOAT64_ARRAY, payload)["data"], dtype=np.float64)
        except cdr.CdrError:
            self.counters["malformed"] += 1
            return
        if action.shape != (self.env.action_dim,):
            self.counters["wrong_length"] += 1
            return
        if not np.all(np.isfinite(action)):
            self.counters["nonfinite"] += 1
            return
        if self.view is not None and self.view.delta:  # absolute targets, turned into a delta when the env steps
            self.counters["received"] += 1
            self.target, self._last_command = action, time.monotonic()
            return
        if self.view is not None:  # joint targets (rad) to the action
            action = self.view.action(action)
        self.counters["received"] += 1
        clipped = np.clip(action, self.low, self.high)
        if not np.array_equal(clipped, action):
            self.counters["clipped"] += 1
        self.action, self._last_command = clipped, time.monotonic()

    def _step(self, result: ServeResult) -> np.ndarray:
        import torch

        if self.command_timeout > 0 and time.monotonic() - self._last_command > self.command_timeout:
            self.action, self.target = np.zeros(self.env.action_dim), None
            self._last_command = math.nan
            self.counters["command_timeout"] += 1
        if self.target is not None:  # a delta robot: the action that moves the PD targets to the commanded ones
            action = self.view.action(self.target)
            self.action = np.clip(action, self.low, self.high)
            self.counters["clipped"] += int(not np.array_equal(self.action, action))
        obs, reward, terminated, truncated, info = self.env.step(
            torch.as_tensor(self.action[None], dtype=torch.float32)
        )
        result.steps += 1
        if self.view is not None:
            self.view.step(self.env.dt, bool(terminated[0]))
        if bool(terminated[0] or truncated[0]):
            self.episodes = (self.episodes + 1) % 2**32
            if self.target is not None:  # a new episode: a delta robot holds its reset pose until the next command
                self.action, self.target = np.zeros(self.env.action_dim), None
            result.episode_returns.append(float(info["episode_return"][0]))
            result.episode_lengths.append(int(info["episode_length"][0]))
            success = ""
            if "is_success" in info:  # the task's success, as the env reports it
                result.episode_successes.append(bool(info["is_success"][0]))
                success = f", success {int(result.episode_successes[-1])}"
            self.log(
                f"episode {len(result.episode_returns)}: return {result.episode_returns[-1]:.3f} "
                f"({result.episode_lengths[-1]} steps{success})"
            )
        return obs[0].numpy().astype(np.float64)

    def run(
        self, duration: float | None = None, episodes: int | None = None, stop: threading.Event | None = None
    ) -> ServeResult:
        """Serve until ``duration`` seconds pass, ``episodes`` episodes end, ``stop`` is set or Ctrl-C."""
        deadline = run_deadline(duration, episodes)
        result = ServeResult()
        self.log(self.ready_line())
        obs = self.env.reset(seed=self.seed)[0].numpy().astype(np.float64)
        started, next_tick = False, time.monotonic()
        try:
            while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
                if episodes is not None and len(result.episode_returns) >= episodes:
                    break
                now = time.monotonic()
                self._receive(now)
                if now >= next_tick:
                    if started:
                        obs = self._step(result)
                    started = started or self.counters["received"] > 0
                    self._publish(obs)
                    next_tick += self.period
                    if next_tick < now:
                        self.counters["overrun"] += 1
                        next_tick = now + self.period
                self._flush(time.monotonic())
                wake = min(next_tick, deadline, *(q[0][0] for q in (self._inbox, self._outbox) if q))
                time.sleep(min(max(wake - time.monotonic(), 0.0), 0.0005))
        except KeyboardInterrupt:
            self.log("sim-robot: interrupted")
        result.counters = {**dict(self.counters), **{f"link.{k}": v for k, v in self.link.counters.items() if v}}
        if self.view is not None and self.view.tracking:
            t = self.view.tracking_summary()
            self.log(
                f"sim-robot: tracking {self.cmd_vel_topic} over {t['steps']:.0f} steps: velocity error steady "
                f"{t['vel_steady']:.4f} / all {t['vel_all']:.4f} m/s, yaw-rate error steady {t['yaw_steady']:.4f}"
                f" / all {t['yaw_all']:.4f} rad/s, falls {t['falls']}"
            )
        for notice in self.link.take_notices():
            self.log(f"sim-robot: {notice}")
        return result

    def close(self) -> None:
        try:
            self.link.close()
        finally:
            self.env.close()
