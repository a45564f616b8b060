"""Command generators of a term task (``task.commands``): what the policy is asked to do, resampled over time.

Shapes: M rows being sampled, C command dim.

``velocity``: (forward m/s, lateral m/s, yaw rate rad/s) in the base's heading frame, each uniform in its range; a
``standing`` share of the draws is all zeros (the robot must also learn to stand still). ``pose``: an end-effector
target in the base frame, position uniform in a box and orientation from uniform roll, pitch and yaw (intrinsic
z-y-x), as (x, y, z, qw, qx, qy, qz). Both are drawn at every reset and again after ``resample_s`` seconds
(uniform in [low, high], per env).
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from robopt.envs.robot.signals import euler_quat

VELOCITY_KEYS = ("lin_vel_x", "lin_vel_y", "ang_vel_z")
POSE_KEYS = ("x", "y", "z", "roll", "pitch", "yaw")
COMMON_KEYS = ("type", "resample_s")


def _range(key: str, value) -> tuple[float, float]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2
    ok = ok and all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    if not ok or value[0] > value[1]:
        raise ValueError(f"{key}: expected [low, high] with finite low <= high, got {value!r}")
    return float(value[0]), float(value[1])


def _uniform(low: torch.Tensor, high: torch.Tensor, num: int, generator: torch.Generator) -> torch.Tensor:
    """U(low, high) [num, C] on the generator's device, float64."""
    draw = torch.rand(num, low.numel(), generator=generator, device=generator.device, dtype=torch.float64)
    return low.to(draw.device) + (high - low).to(draw.device) * draw


class Command:
    """A command generator: ``sample(num, generator) -> [num, C]`` float64 on the generator's device."""

    kind = ""
    keys: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    defaults: dict[str, tuple[float, float]] = {}

    def __init__(self, config: dict, section: str = "task.commands") -> None:
        unknown = [key for key in config if key not in (*COMMON_KEYS, *self.keys, *self.extra_keys())]
        if unknown:
            allowed = ", ".join((*COMMON_KEYS, *self.keys, *self.extra_keys()))
            raise ValueError(f"{section}.{unknown[0]}: unknown key of a {self.kind} command; allowed: {allowed}")
        self.ranges = {key: _range(f"{section}.{key}", config.get(key, self.defaults[key])) for key in self.keys}
        self.resample_s = _range(f"{section}.resample_s", config.get("resample_s", [10.0, 10.0]))
        if self.resample_s[0] <= 0:
            raise ValueError(f"{section}.resample_s: expected seconds > 0, got {list(self.resample_s)}")
        self.low = torch.tensor([self.ranges[key][0] for key in self.keys], dtype=torch.float64)
        self.high = torch.tensor([self.ranges[key][1] for key in self.keys], dtype=torch.float64)

    def extra_keys(self) -> tuple[str, ...]:
        return ()

    @property
    def dim(self) -> int:
        return len(self.names)

    def describe(self) -> dict:
        """The ranges for the export sidecar (what the policy was trained on)."""
        return {"type": self.kind, "names": list(self.names), "ranges": {k: list(v) for k, v in self.ranges.items()},
                "resample_s": list(self.resample_s)}  # fmt: skip


class VelocityCommand(Command):
    """(vx, vy, yaw rate), uniform in their ranges; a ``standing`` share are zero."""

    kind = "velocity"
    keys = VELOCITY_KEYS
    names = VELOCITY_KEYS
    defaults = {"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-0.5, 0.5), "ang_vel_z": (-1.0, 1.0)}

    def __init__(self, config: dict, section: str = "task.commands") -> None:
        super().__init__(config, section)
        standing = config.get("standing", 0.0)
        if isinstance(standing, bool) or not isinstance(standing, Real) or not 0.0 <= standing <= 1.0:
            raise ValueError(f"{section}.standing: expected a share in [0, 1], got {standing!r}")
        self.standing = float(standing)

    def extra_keys(self) -> tuple[str, ...]:
        return ("standing",)

    def describe(self) -> dict:
        return {**super().describe(), "standing": self.standing}

    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        command = _uniform(self.low, self.high, num, generator)  # [M, 3]
        if self.standing > 0:
            still = torch.rand(num, generator=generator, device=generator.device, dtype=torch.float64) < self.standing
            command = command * ~still[:, None]
        return command


class PoseCommand(Command):
    """An end-effector target in the base frame: position in a box, orientation from roll, pitch, yaw ranges."""

    kind = "pose"
    keys = POSE_KEYS
    names = ("x", "y", "z", "qw", "qx", "qy", "qz")
    defaults = {"x": (0.3, 0.5), "y": (-0.2, 0.2), "z": (0.2, 0.5), "roll": (0.0, 0.0), "pitch": (0.0, 0.0),
                "yaw": (0.0, 0.0)}  # fmt: skip

    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        draw = _uniform(self.low, self.high, num, generator)  # [M, 6]
        quat = euler_quat(draw[:, 3], draw[:, 4], draw[:, 5])
        quat = torch.where(quat[:, :1] < 0, -quat, quat)  # w >= 0: one of the two quaternions of a rotation
        return torch.cat([draw[:, :3], quat], dim=1)


COMMANDS = {"velocity": VelocityCommand, "pose": PoseCommand}


def parse_command(config, section: str = "task.commands") -> Command | None:
    """The command generator of ``task.commands`` (None when the mapping is empty); ValueError naming the key."""
    if not config:
        return None
    if not isinstance(config, dict):
        raise ValueError(f"{section}: expected a mapping with a type ({', '.join(COMMANDS)}), got {config!r}")
    kind = config.get("type")
    if kind not in COMMANDS:
        raise ValueError(f"{section}.type: {kind!r} is not a command type; allowed: {', '.join(COMMANDS)}")
    return COMMANDS[kind](config, section)
