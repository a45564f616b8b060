"""A robot from its description as ROS 2 topics, for ``robopt sim-robot CONFIG --ros2/--zenoh`` (torch, MuJoCo).

``RobotTopics(env)`` reads a one-row robot env (``env.id: robot``) through its ``Signals`` and writes what a
legged robot's drivers publish, stamped with the wall-clock time of the measurement:
    ``/joint_states``  sensor_msgs/JointState: the actuated joints by name, position, velocity, effort (the
                       actuator force after its limit)
    ``/imu``           sensor_msgs/Imu (a robot with an IMU; a fixed-base arm has none): the IMU frame's orientation
                       (x, y, z, w) and angular velocity in that frame; no accelerometer is simulated
                       (linear_acceleration_covariance[0] = -1, ROS's "not provided")
    ``/odom``          nav_msgs/Odometry (floating bases): the base pose in the world and its twist in the base
                       frame (REP 105: the child frame ``base``), as a state estimator would publish it
The command is joint position targets in radians, the policy's joint order (a ros2_control forward position
controller's Float64MultiArray): ``action = (target - default) / scale``, as the export sidecar states it; a
``joint_effort`` robot takes torques (``action = torque / scale``); a ``joint_position_delta`` robot's targets are
absolute as well, turned into its delta action against the joints' positions when the env steps (``action =
(target - measured) / scale``; its gripper's element as a joint_position's). The PD control runs inside MuJoCo at
the physics rate. ``track(twist)`` with ``step()`` scores a velocity command against the body's velocity as
``benchmarks/quadruped_tracking.py`` does (planar speed error, yaw-rate error; steady leaves out 1 s after each
change; a fall is an episode that ends terminated).
"""

from __future__ import annotations

import math

import numpy as np

JOINT_STATE, IMU, ODOMETRY = "sensor_msgs/msg/JointState", "sensor_msgs/msg/Imu", "nav_msgs/msg/Odometry"
SETTLE_S = 1.0  # tracking: the response time left out of the steady errors


def is_robot_env(env) -> bool:
    robot = getattr(getattr(env, "task", None), "robot", None)
    return robot is not None and hasattr(robot, "joint_names") and getattr(env, "num_envs", 0) == 1


def _stamp(wall_time: float) -> dict:
    return {"sec": int(wall_time), "nanosec": min(int((wall_time % 1.0) * 1e9), 999_999_999)}


def _xyz(values) -> dict:
    return dict(zip("xyz", (float(v) for v in values)))


class RobotTopics:
    def __init__(self, env) -> None:
        self.env, self.task, self.robot = env, env.task, env.task.robot
        self.names = list(self.robot.joint_names)
        self.scale = np.asarray(self.robot.action_scale, dtype=np.float64)
        self.offset = np.asarray(self.robot.action_offset, dtype=np.float64)
        self.delta = self.robot.action_type == "joint_position_delta"  # targets become deltas at step time
        self.absolute = np.zeros(len(self.names), dtype=bool)  # [A] a delta robot's gripper element
        if self.robot.gripper is not None:
            self.absolute[self.robot.gripper.action_index] = True
        self.floating = bool(self.robot.floating)
        self.imu = "imu_quat" in self.robot.sensors  # a fixed-base arm built without an IMU publishes no /imu
        self.command = np.zeros(3)  # the tracked (vx, vy, yaw rate)
        self.tracking = False
        self._since_change = 0.0
        self._sums = dict.fromkeys(("vel_all", "yaw_all", "vel_steady", "yaw_steady", "all", "steady"), 0.0)
        self.falls = 0

    def publications(self) -> dict[str, str]:
        topics = {"/joint_states": JOINT_STATE}
        if self.imu:
            topics["/imu"] = IMU
        if self.floating:
            topics["/odom"] = ODOMETRY
        return topics

    def _signals(self):
        from robopt.envs.robot.signals import Signals

        return Signals(self.env.physics.state(), self.robot, self.task.context)

    def messages(self, wall_time: float) -> list[tuple[str, str, dict]]:
        """(topic, type, message) of what the robot measures now."""
        s = self._signals()
        header = {"stamp": _stamp(wall_time), "frame_id": "base"}
        joints = {"header": header, "name": self.names, "position": s.joint_pos[0].double().numpy(),
                  "velocity": s.joint_vel[0].double().numpy(),
                  "effort": s.joint_torque[0].double().numpy()}  # fmt: skip
        out = [("/joint_states", JOINT_STATE, joints)]
        if not self.imu:
            return out
        w, x, y, z = s.base_quat[0].double().tolist()
        orientation = {"x": x, "y": y, "z": z, "w": w}
        angular = _xyz(s.base_ang_vel[0].tolist())
        imu = {"header": {**header, "frame_id": "imu"}, "orientation": orientation, "angular_velocity": angular,
               "linear_acceleration_covariance": [-1.0] + [0.0] * 8}  # fmt: skip
        out.append(("/imu", IMU, imu))
        if self.floating:
            odom = {"header": {**header, "frame_id": "odom"}, "child_frame_id": "base",
                    "pose": {"pose": {"position": _xyz(s.base_pos[0].tolist()), "orientation": orientation}},
                    "twist": {"twist": {"linear": _xyz(s.base_lin_vel[0].tolist()), "angular": angular}}}  # fmt: skip
            out.append(("/odom", ODOMETRY, odom))
        return out

    def action(self, command: np.ndarray) -> np.ndarray:
        """The env action for a command of joint targets (joint_position; joint_position_delta against the joints'
        positions now) or torques (joint_effort) [A]."""
        command = np.asarray(command, dtype=np.float64)
        if not self.delta:
            return (command - self.offset) / self.scale
        measured = self._signals().joint_pos[0].double().numpy()  # [A]
        return (command - np.where(self.absolute, self.offset, measured)) / self.scale

    def track(self, twist: dict) -> None:
        """A new velocity command to score (a decoded geometry_msgs/Twist)."""
        linear, angular = twist.get("linear") or {}, twist.get("angular") or {}
        command = np.array([linear.get("x", 0.0), linear.get("y", 0.0), angular.get("z", 0.0)], dtype=np.float64)
        if not np.all(np.isfinite(command)):
            return
        if not np.array_equal(command, self.command):
            self._since_change = 0.0
        self.command, self.tracking = command, True

    def step(self, dt: float, terminated: bool) -> None:
        """Score the state after a step against the tracked command."""
        if not self.tracking:
            return
        if terminated:
            self.falls += 1
            return
        s = self._signals()
        velocity = s.base_lin_vel[0].double().numpy()
        yaw_rate = float(s.base_ang_vel[0, 2])
        errors = {"vel": float(np.linalg.norm(self.command[:2] - velocity[:2])),
                  "yaw": abs(self.command[2] - yaw_rate)}  # fmt: skip
        keys = ("all", "steady") if self._since_change >= SETTLE_S else ("all",)
        for key in keys:
            self._sums[key] += 1
            for name, error in errors.items():
                self._sums[f"{name}_{key}"] += error
        self._since_change += dt

    def tracking_summary(self) -> dict[str, float]:
        sums = self._sums
        result = {
            f"{name}_{key}": sums[f"{name}_{key}"] / sums[key] if sums[key] else math.nan
            for name in ("vel", "yaw")
            for key in ("steady", "all")
        }
        return {**result, "steps": sums["all"], "falls": self.falls}
