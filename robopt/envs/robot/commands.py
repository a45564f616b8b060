"""Commands of a term task (``task.commands``): what the policy is asked to do, an open family of generators.

Shapes: N envs, M rows being drawn, C command dim.

A command kind is a ``Command`` subclass registered with ``@command_kind``, or a user's class named by ``task.commands:
{hook: package.module:Class, ...}``. It parses its own keys (one line naming a bad one), states which needs of terms
it satisfies (``provides``: a ``velocity`` or ``pose`` command for the terms that read one), names its elements, and
says how a robot computer receives it (``deploy``: the message and fields, in the export sidecar). Bound to the env
(``bind``), it owns its state: the value [N, C] the policy sees (written in place, read by the terms through the
task's context) and each row's time to the next draw. ``reset(rows, generator)`` draws new values for rows that
start an episode, ``advance(generator)`` counts one control step down and redraws the rows whose time ran out
(after ``resample_s`` seconds, uniform in [low, high], per row). Its ranges are plain attributes, so a curriculum
can move them between draws.

``velocity``: (forward m/s, lateral m/s, yaw rate rad/s) in the base's heading frame, each uniform in its range; a
``standing`` share of the draws is all zeros (the robot must also learn to stand still). ``pose``: an end-effector
target in the base frame, position uniform in a box and orientation from uniform roll, pitch and yaw (intrinsic
z-y-x), as (x, y, z, qw, qx, qy, qz). ``target``: where an object should go (x, y, z, cos yaw, sin yaw).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from numbers import Real

import torch

from robopt.envs.robot.signals import euler_quat
from robopt.envs.robot.terms import command, import_hook
from robopt.options import low_high

COMMON_KEYS = ("type", "resample_s", "hook")
COMMANDS: dict[str, type[Command]] = {}


def command_kind(name: str):
    """Register a ``Command`` subclass as ``task.commands.type: name``."""

    def register(cls: type[Command]) -> type[Command]:
        cls.kind = name
        COMMANDS[name] = cls
        return cls

    return register


class Command(ABC):
    """A command generator (the module doc). Subclasses set ``keys`` (their ranges, with ``defaults``), ``names``
    (one per element), ``provides`` and ``deploy``, and implement ``sample``."""

    kind = ""
    keys: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    defaults: dict[str, tuple[float, float]] = {}
    default_resample_s: tuple[float, float] = (10.0, 10.0)
    provides: tuple[str, ...] = ()
    # how a robot computer receives it: {"topic": key of robot.topics, "type": message, "fields": {name: field}}
    deploy: dict | None = None
    mirror_signs: tuple[float, ...] | None = None  # each element's sign in the left-right mirror image; None: none

    def __init__(self, config: dict, section: str = "task.commands") -> None:
        allowed = (*COMMON_KEYS, *self.keys, *self.extra_keys())
        unknown = [key for key in config if key not in allowed]
        if unknown:
            raise ValueError(
                f"{section}.{unknown[0]}: unknown key of a {self.kind} command; allowed: {', '.join(allowed)}"
            )
        self.ranges = {key: low_high(f"{section}.{key}", config.get(key, self.defaults[key])) for key in self.keys}
        self.resample_s = low_high(f"{section}.resample_s", config.get("resample_s", list(self.default_resample_s)))
        if self.resample_s[0] <= 0:
            raise ValueError(f"{section}.resample_s: expected seconds > 0, got {list(self.resample_s)}")
        self.value: torch.Tensor | None = None  # [N, C], once bound
        self.timer: torch.Tensor | None = None  # [N] control steps left before the next draw

    def extra_keys(self) -> tuple[str, ...]:
        return ()

    @property
    def dim(self) -> int:
        return len(self.names)

    @property
    def low(self) -> torch.Tensor:
        return torch.tensor([self.ranges[key][0] for key in self.keys], dtype=torch.float64)

    @property
    def high(self) -> torch.Tensor:
        return torch.tensor([self.ranges[key][1] for key in self.keys], dtype=torch.float64)

    def uniform(self, num: int, generator: torch.Generator) -> torch.Tensor:
        """U(low, high) of every key [num, len(keys)], float64 on the generator's device."""
        draw = torch.rand(num, len(self.keys), generator=generator, device=generator.device, dtype=torch.float64)
        low, high = self.low.to(draw.device), self.high.to(draw.device)
        return low + (high - low) * draw

    @abstractmethod
    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        """New commands [num, C], float64 on the generator's device."""

    def describe(self) -> dict:
        """What the policy was trained on, for the export sidecar."""
        return {
            "type": self.kind,
            "names": list(self.names),
            "ranges": {k: list(v) for k, v in self.ranges.items()},
            "resample_s": list(self.resample_s),
            "deploy": self.deploy,
        }

    # -- bound to an env --------------------------------------------------------------------------------------------
    def bind(self, num_envs: int, device: torch.device, dtype: torch.dtype, control_dt: float) -> torch.Tensor:
        """Allocate the state of ``num_envs`` rows; returns the value tensor [N, C] (zeros until the first draw)."""
        self.value = torch.zeros(num_envs, self.dim, device=device, dtype=dtype)
        self.timer = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.control_dt = control_dt
        return self.value

    def reset(self, rows: torch.Tensor, generator: torch.Generator) -> None:
        """New commands and their next draw's time for rows [M] (draws on the generator's device)."""
        self.value[rows] = self.sample(rows.numel(), generator).to(self.value.device, self.value.dtype)
        low, high = self.resample_s
        seconds = low + (high - low) * torch.rand(
            rows.numel(), generator=generator, device=generator.device, dtype=torch.float64
        )
        steps = torch.clamp(torch.round(seconds / self.control_dt), min=1).long()
        self.timer[rows] = steps.to(self.timer.device)

    def advance(self, generator: torch.Generator) -> None:
        """One control step: rows whose time ran out draw anew."""
        self.timer -= 1
        rows = (self.timer <= 0).nonzero()[:, 0]
        if rows.numel() > 0:
            self.reset(rows, generator)

    def state_dict(self) -> dict:
        return {
            "value": self.value.detach().cpu().clone(),
            "timer": self.timer.detach().cpu().clone(),
            "ranges": dict(self.ranges),
        }

    def load_state_dict(self, state: dict) -> None:
        self.value.copy_(state["value"])
        self.timer.copy_(state["timer"])
        self.ranges = {key: tuple(value) for key, value in state["ranges"].items()}


VELOCITY = command("velocity")  # the need of the terms that read a velocity command
POSE = command("pose")  # ... and of those that read an end-effector target
TARGET = command("target")  # ... and of those that read where an object should go


@command_kind("velocity")
class VelocityCommand(Command):
    """(vx, vy, yaw rate), uniform in their ranges; a ``standing`` share are zero."""

    keys = ("lin_vel_x", "lin_vel_y", "ang_vel_z")
    names = keys
    defaults = {"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-0.5, 0.5), "ang_vel_z": (-1.0, 1.0)}
    provides = ("velocity",)
    mirror_signs = (1.0, -1.0, -1.0)  # mirrored through the base's x-z plane: vx, -vy, -yaw rate
    deploy = {"topic": "cmd_vel", "type": "geometry_msgs/Twist",
              "fields": {"lin_vel_x": "linear.x", "lin_vel_y": "linear.y", "ang_vel_z": "angular.z"}}  # fmt: skip

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
        command = self.uniform(num, generator)  # [M, 3]
        if self.standing > 0:
            still = torch.rand(num, generator=generator, device=generator.device, dtype=torch.float64) < self.standing
            command = command * ~still[:, None]
        return command


@command_kind("pose")
class PoseCommand(Command):
    """An end-effector target in the base frame: position in a box, orientation from roll, pitch, yaw ranges."""

    keys = ("x", "y", "z", "roll", "pitch", "yaw")
    names = ("x", "y", "z", "qw", "qx", "qy", "qz")
    defaults = {"x": (0.3, 0.5), "y": (-0.2, 0.2), "z": (0.2, 0.5), "roll": (0.0, 0.0), "pitch": (0.0, 0.0),
                "yaw": (0.0, 0.0)}  # fmt: skip
    provides = ("pose",)

    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        draw = self.uniform(num, generator)  # [M, 6]
        quat = euler_quat(draw[:, 3], draw[:, 4], draw[:, 5])
        quat = torch.where(quat[:, :1] < 0, -quat, quat)  # w >= 0: one of the two quaternions of a rotation
        return torch.cat([draw[:, :3], quat], dim=1)


@command_kind("target")
class TargetCommand(Command):
    """Where an object should go, in the base frame: a position in a box and a yaw about the vertical, drawn at
    every reset and kept for the episode (unless ``resample_s`` says otherwise); elements (x, y, z, cos yaw, sin
    yaw). Its x and y ranges must lie on the table of the task's scene."""

    keys = ("x", "y", "z", "yaw")
    names = ("x", "y", "z", "cos_yaw", "sin_yaw")
    defaults = {"x": (0.4, 0.6), "y": (-0.2, 0.2), "z": (0.02, 0.02), "yaw": (0.0, 0.0)}
    default_resample_s = (1.0e6, 1.0e6)
    provides = ("target",)

    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        draw = self.uniform(num, generator)  # [M, 4]
        return torch.cat([draw[:, :3], torch.cos(draw[:, 3:]), torch.sin(draw[:, 3:])], dim=1)


def parse_command(config, section: str = "task.commands") -> Command | None:
    """The command generator of ``task.commands`` (None when the mapping is empty); ValueError naming the key.

    ``type`` picks a registered kind; ``hook: package.module:Class`` a user's ``Command`` subclass instead."""
    if not config:
        return None
    if not isinstance(config, dict):
        raise ValueError(f"{section}: expected a mapping with a type ({', '.join(COMMANDS)}), got {config!r}")
    if "hook" in config:
        cls = import_hook(section, config["hook"])
        if not (inspect.isclass(cls) and issubclass(cls, Command)):
            raise ValueError(
                f"{section}.hook={config['hook']!r} is not a subclass of robopt.envs.robot.commands.Command"
            )
        return cls(config, section)
    kind = config.get("type")
    if kind not in COMMANDS:
        raise ValueError(
            f"{section}.type: {kind!r} is not a command type; allowed: {', '.join(COMMANDS)} "
            "(or hook: package.module:Class)"
        )
    return COMMANDS[kind](config, section)
