"""The deploy YAML (``DeployConfig``), the safety layer it configures, and the tick log path check.

Torch-free (numpy, pyyaml). ``robopt.sim2real.runtime`` re-exports these names.
    DeployConfig     the deploy YAML (period, bounds, rate limit, stale timeout, watchdog, e-stop, safe action...)
    build_safety     the SafetyLayer for a policy, its sidecar and a DeployConfig
    check_log_path   a tick log path that can be written, checked before the loop starts
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robopt.config import build_dataclass
from robopt.options import ConfigError, option
from robopt.sim2real.joint_measure import gripper_elements, measured_joints
from robopt.sim2real.safety import SafetyLayer
from robopt.sim2real.sidecar import DeployError, Sidecar

MAX_LOG_CAPACITY = 10_000_000  # ticks; 64 bytes each with six actions: 0.64 GB


@dataclass(frozen=True)
class DeployConfig:
    period: float = option(0.0, "control period in seconds (0: the policy's control_period from policy.json)")
    obs_low: Any = option(None, "observation lower bounds (a number or D numbers) replacing policy.json's; null: keep")
    obs_high: Any = option(None, "observation upper bounds (a number or D numbers) replacing policy.json's; null: keep")
    obs_bound_action: str = option("safe", "an observation outside its bounds: safe action or clip", ("safe", "clip"))
    max_action_delta: Any = option(None, "largest action change per tick (a number or A numbers > 0); null: no limit")
    stale_timeout_ms: float = option(0.0, "an observation older than this is stale (0: three control periods)")
    watchdog_ms: float = option(0.0, "compute budget per tick; a tick over it is a fault (0: the period)")
    estop_after: int = option(10, "consecutive faulty ticks that latch the e-stop (0: never)")
    safe_action: str = option(
        "",
        "action target on a fault: the last action sent, zero, a posture, or the last measured joint positions "
        "(robot tasks with joint position actions); empty: measured for a joint_position_delta policy (whose hold "
        "would repeat its last step), else hold",
        ("", "hold", "zero", "posture", "measured"),
    )
    estop_action: str = option(
        "",
        "action target once the e-stop latched (empty: safe_action's); measured keeps following the measured pose, "
        "so the joints' PD servos only damp (the damping stop)",
        ("", "hold", "zero", "posture", "measured"),
    )
    posture: Any = option(None, "the safe posture (A numbers within the action bounds) for safe_action: posture")
    tick_on: str = option(
        "clock",
        "clock: tick every period of the runtime's clock; measurement: tick when a new observation arrives "
        "(never sooner than a period after the last tick, at most a quarter period later), so the policy acts on the "
        "freshest measurement",
        ("clock", "measurement"),
    )
    min_rate_share: float = option(
        0.9, "a second in which the loop ticks below this share of 1/period is reported at the time (0: never)"
    )
    cpu_affinity: tuple[int, ...] = option(
        (), "pin the control loop's thread to these CPU ids (Linux); empty: no pinning"
    )
    realtime_priority: int = option(
        0,
        "request real-time scheduling (SCHED_FIFO) at this priority, 1 to 99 (Linux; needs root or "
        "CAP_SYS_NICE, else one line and the normal scheduler); 0: the normal scheduler",
    )
    chunk_replan_every: int = option(0, "action chunks (H > 1): call the policy every k ticks (0: every H ticks)")
    log_capacity: int = option(100_000, f"ticks kept in the ring log (1 to {MAX_LOG_CAPACITY:_})")
    log_path: str = option("", "save the tick log here (.npy) when the loop closes; empty: no file")
    robot: dict = option(
        {},
        "ros2:// and zenoh:// robots: transport options, QoS, the observation map and the command "
        "(robopt.sim2real.ros_map); empty: robopt sim-robot's /robopt/observation and /robopt/command",
    )

    def __post_init__(self) -> None:
        checks = {
            "period": self.period >= 0,
            "stale_timeout_ms": self.stale_timeout_ms >= 0,
            "watchdog_ms": self.watchdog_ms >= 0,
            "estop_after": self.estop_after >= 0,
            "chunk_replan_every": self.chunk_replan_every >= 0,
        }
        for name, ok in checks.items():
            if not ok or not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.min_rate_share <= 1:
            raise ValueError(f"min_rate_share must be between 0 and 1, got {self.min_rate_share!r}")
        if not 0 <= self.realtime_priority <= 99:
            raise ValueError(f"realtime_priority must be between 0 (off) and 99, got {self.realtime_priority!r}")
        cpus = os.cpu_count() or 1
        if not all(0 <= cpu < cpus for cpu in self.cpu_affinity) or len(set(self.cpu_affinity)) != len(
            self.cpu_affinity
        ):
            raise ValueError(
                f"cpu_affinity must list distinct CPU ids from 0 to {cpus - 1} (this machine), got "
                f"{list(self.cpu_affinity)!r}"
            )
        if not 1 <= self.log_capacity <= MAX_LOG_CAPACITY:
            raise ValueError(f"log_capacity must be between 1 and {MAX_LOG_CAPACITY:_} ticks, got {self.log_capacity}")


def load_deploy_config(source: str | Path | dict | None = None) -> DeployConfig:
    """A DeployConfig from a YAML file, a dict or None (defaults); ConfigError (one line) on a bad key or value."""
    if source is None or isinstance(source, dict):
        return build_dataclass(DeployConfig, source)
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"deploy config file {str(path)!r} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"deploy config {str(path)!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    return build_dataclass(DeployConfig, data)


def _config_vector(name: str, value, size: int) -> np.ndarray | None:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(value, (list, tuple)) and len(value) == size:
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok:
        raise DeployError(f"deploy config: {name} must be a number or a list of {size} numbers, got {value!r:.80}")
    return np.asarray(value, dtype=np.float64)


def measured_pose(sidecar: Sidecar) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str]:
    """The map from the robot's observation [D] to the action [A] whose joint targets are the measured joint
    positions, and ""; or None and why there is none (a policy not from a robot task, effort actions, no
    ``joint_pos`` term naming every joint). ``joint_position``: action = (measured - offset) / scale, the positions
    from the ``joint_pos`` term (``robopt.sim2real.joint_measure``); ``joint_position_delta``: zero (the target is
    the measured position). A gripper's element is NaN: it keeps the last action sent (the safety layer fills it),
    so a held object stays held."""
    robot = sidecar.robot
    if not robot:
        return None, f"policy.json has no robot block (env {sidecar.env_id!r} is not a robot task)"
    kind = robot.get("action_type")
    keep = gripper_elements(robot, sidecar.action_dim)
    if kind == "joint_position_delta":
        zero = np.where(keep, np.nan, 0.0)
        return (lambda obs: zero), ""
    if kind != "joint_position":
        return None, f"its actions are {kind!r}, not joint position targets"
    joints, why = measured_joints(robot, sidecar.action_dim)
    if joints is None:
        return None, why
    offset, scale = (np.asarray(robot[key], dtype=np.float64) for key in ("action_offset", "action_scale"))
    return (lambda obs: (joints(obs) - offset) / scale), ""


def build_safety(
    policy: Callable, sidecar: Sidecar, config: DeployConfig, stale_timeout: float, future_tolerance: float = 0.0
) -> SafetyLayer:
    """The SafetyLayer for this policy and deploy config; DeployError (one line) for a value that cannot work."""
    obs_dim, (declared_low, declared_high) = sidecar.robot_obs_dim, sidecar.robot_obs_bounds  # the robot's [D]
    obs_low = _config_vector("obs_low", config.obs_low, obs_dim)
    obs_high = _config_vector("obs_high", config.obs_high, obs_dim)
    delta = (sidecar.robot or {}).get("action_type") == "joint_position_delta"
    safe_action = config.safe_action or ("measured" if delta else "hold")
    estop_action = config.estop_action or safe_action
    if delta and "hold" in (safe_action, estop_action):
        raise DeployError(
            "deploy config: safe_action/estop_action hold repeats the last step of a joint_position_delta policy "
            "(the joints keep moving); use measured (hold the measured pose, a gripper keeps its command)"
        )
    measure = None
    if "measured" in (safe_action, estop_action):
        measure, why = measured_pose(sidecar)
        if measure is None:
            which = "safe_action" if safe_action == "measured" else "estop_action"
            raise DeployError(f"deploy config: {which} measured needs the measured joint positions, but {why}")
    try:
        return SafetyLayer(
            policy,
            obs_dim,
            sidecar.action_low,
            sidecar.action_high,
            obs_low=declared_low if obs_low is None else obs_low,
            obs_high=declared_high if obs_high is None else obs_high,
            clip_obs=config.obs_bound_action == "clip",
            max_action_delta=_config_vector("max_action_delta", config.max_action_delta, sidecar.action_dim),
            stale_timeout=stale_timeout,
            future_tolerance=future_tolerance,
            estop_after=config.estop_after,
            safe_action=safe_action,
            estop_action=estop_action,
            measure=measure,
            posture=_config_vector("posture", config.posture, sidecar.action_dim),
        )
    except ValueError as error:
        raise DeployError(f"deploy config: {error}") from None


def check_log_path(path: str | Path) -> Path:
    """``path`` once a tick log can be written there (not a directory, in an existing directory, creatable).

    DeployError (one line) otherwise. Leaves no file behind (one created to find out is removed again).
    """
    path = Path(path)
    if path.is_dir():
        raise DeployError(f"log path {str(path)!r} is a directory; give a file name, e.g. {str(path / 'ticks.npy')!r}")
    if not path.parent.is_dir():
        raise DeployError(f"log path {str(path)!r}: the directory {str(path.parent)!r} does not exist")
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as error:
        raise DeployError(f"log path {str(path)!r} cannot be written: {error.strerror or error}") from None
    if not existed:
        path.unlink(missing_ok=True)
    return path
