"""The ``robot`` and ``task`` config sections (``env.id: robot``), checked when a config is loaded.

What can be checked without the model is checked here (unknown keys and terms, weights that are not numbers,
decimation 0, hooks that cannot be imported); what needs the model (joint and body names, ranges, meshes) is
checked by ``robopt.envs.robot.builder`` when the env is built. Both give one line naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

from robopt.config import ConfigError
from robopt.envs.robot.command_curriculum import CommandCurriculumConfig
from robopt.envs.robot.commands import parse_command
from robopt.envs.robot.library import REGISTRY
from robopt.envs.robot.link import LinkConfig
from robopt.envs.robot.scene import SceneConfig
from robopt.envs.robot.terms import parse_terms
from robopt.envs.robot.terrain import TerrainConfig
from robopt.options import AT_LEAST_ONE, FINITE, NON_NEGATIVE, POSITIVE, option

ROBOT_ENV_ID = "robot"
JOINT_KEYS = ("kp", "kd", "effort", "armature", "damping", "frictionloss", "scale")
RESET_KEYS = ("joint_pos", "base_yaw", "base_xy", "base_velocity")


@dataclass(frozen=True)
class SimConfig:
    timestep: float = option(0.005, "physics timestep (s)", check=POSITIVE)
    decimation: int = option(
        4, "physics steps per control step: the policy acts every timestep * decimation s", check=AT_LEAST_ONE
    )
    integrator: str = option("implicitfast", "MuJoCo integrator", ("euler", "implicit", "implicitfast", "rk4"))
    solver: str = option("newton", "constraint solver", ("newton", "cg", "pgs"))
    iterations: int = option(10, "solver iterations per step", check=AT_LEAST_ONE)
    ls_iterations: int = option(20, "line-search iterations per solver iteration", check=AT_LEAST_ONE)
    cone: str = option("pyramidal", "friction cone", ("pyramidal", "elliptic"))

    def __post_init__(self) -> None:
        if not (isinstance(self.timestep, float) and 0.0 < self.timestep < math.inf):
            raise ValueError(f"sim.timestep must be a positive number of seconds, got {self.timestep!r}")
        if self.decimation < 1:
            raise ValueError(
                f"sim.decimation must be an integer >= 1 (physics steps per action), got {self.decimation}"
            )
        if self.iterations < 1 or self.ls_iterations < 1:
            raise ValueError(
                f"sim.iterations and sim.ls_iterations must be >= 1, got {self.iterations}, {self.ls_iterations}"
            )


@dataclass(frozen=True)
class FloorConfig:
    type: str = option(
        "plane",
        "ground added to the model: an infinite flat 'plane' at z = 0, or 'none' (the description's own "
        "ground, or a fixed-base arm)",
        ("plane", "none"),
    )
    friction: float = option(
        1.0, "the floor's sliding friction (MuJoCo takes the larger of the two geoms')", check=NON_NEGATIVE
    )


@dataclass(frozen=True)
class GripperConfig:
    joints: tuple[str, ...] = option(
        (),
        "a parallel-jaw gripper's finger joints (names): the first is driven (one action element, -1 closed, +1 "
        "open), the others follow it through joint equalities; () = no gripper",
    )
    open: float = option(0.04, "the driven joint's position when open (m or rad)", check=FINITE)
    closed: float = option(0.0, "its position when closed (m or rad)", check=FINITE)
    kp: float = option(200.0, "position gain of the finger servo (N/m or N m/rad)", check=POSITIVE)
    kd: float = option(5.0, "its damping gain", check=NON_NEGATIVE)
    effort: float = option(20.0, "the finger servo's force limit (N or N m): the grip force", check=POSITIVE)

    def __post_init__(self) -> None:
        if self.joints and self.open == self.closed:
            raise ValueError(f"gripper.open and gripper.closed must differ, both are {self.open}")
        if len(set(self.joints)) != len(self.joints):
            raise ValueError(f"gripper.joints: a joint is named twice in {list(self.joints)}")


@dataclass(frozen=True)
class RobotConfig:
    mjcf: str = option(
        "",
        "the robot's MJCF (or URDF) file: a path, 'robopt:<name>' for a shipped robot (robopt:quadruped, "
        "robopt:arm), or 'menagerie:<dir>/<file>' from MuJoCo Menagerie (MENAGERIE_ROOT or the mujoco-menagerie "
        "package)",
    )
    joints: dict = option(
        {},
        "actuated joints: regular expression (full match) -> {kp, kd, effort, armature, damping, frictionloss, "
        "scale}; the action follows the model's joint order",
    )
    default_pose: dict = option({}, "joint regular expression -> default position (rad); others keep the model's")
    action: str = option(
        "joint_position",
        "joint_position: PD targets default + scale * action; joint_position_delta: PD targets the measured "
        "positions + scale * action, the action in [-1, 1] (a gripper's element stays absolute); joint_effort: "
        "torques scale * action",
        ("joint_position", "joint_position_delta", "joint_effort"),
    )
    action_scale: float = option(
        0.25, "the action's scale (rad, or N m for joint_effort); a joint's `scale` wins", check=POSITIVE
    )
    actuators: str = option(
        "auto",
        "auto: keep a description's own actuators, add robopt's PD (or torque) actuators when it has none; "
        "replace: drop the description's and add robopt's",
        ("auto", "replace"),
    )
    base: str = option("", "the base body ('' = the world's first child body)")
    base_height: float = option(
        0.0, "a floating base's height at reset (m); 0 puts the feet on the floor", check=NON_NEGATIVE
    )
    imu: str = option("", "the IMU site on the base ('' = a site added at the base body's origin)")
    feet: tuple[str, ...] = option((), "foot geoms or bodies (regular expressions, full match)")
    end_effector: str = option("", "an arm's end-effector site or body (for pose commands and terms)")
    gravity_compensation: bool = option(False, "cancel gravity on the robot's bodies (an arm's controller does)")
    gripper: GripperConfig = option(GripperConfig(), "a parallel-jaw gripper: one action element for its fingers")
    sim: SimConfig = option(SimConfig(), "physics timestep, decimation and solver")
    floor: FloorConfig = option(FloorConfig(), "the ground added under the robot")
    mirror: tuple[tuple[str, ...], ...] = option(
        (),
        "left-right symmetry: [left, right] name substrings that swap a joint (or foot) for its mirror image, e.g. "
        "[[FL_, FR_], [RL_, RR_]]; signs come from the joint axes (robopt.envs.robot.mirror); () = none",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.base_height, float) or self.base_height < 0:
            raise ValueError(f"base_height must be a number >= 0 (m), got {self.base_height!r}")
        if not 0 < self.action_scale < math.inf:
            raise ValueError(f"action_scale must be a finite number > 0, got {self.action_scale!r}")
        for pattern, entry in self.joints.items():
            if not isinstance(entry, dict):
                raise ValueError(f"joints.{pattern}: expected a mapping of {', '.join(JOINT_KEYS)}, got {entry!r}")
            for key, value in entry.items():
                if key not in JOINT_KEYS:
                    raise ValueError(f"joints.{pattern}.{key}: unknown key; allowed: {', '.join(JOINT_KEYS)}")
                if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < math.inf:
                    raise ValueError(f"joints.{pattern}.{key}: expected a number >= 0, got {value!r}")
        for pattern, value in self.default_pose.items():
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(f"default_pose.{pattern}: expected a number (rad), got {value!r}")


@dataclass(frozen=True)
class TaskConfig:
    episode_s: float = option(20.0, "episode length (s): truncated (and bootstrapped) after it", check=POSITIVE)
    commands: dict = option(
        {},
        "command generator: {type: velocity, lin_vel_x: [lo, hi], lin_vel_y, ang_vel_z, resample_s: [lo, hi], "
        "standing: share} or {type: pose, x, y, z, roll, pitch, yaw, resample_s}",
    )
    observations: dict = option({}, "policy observation terms in order: name -> {scale, noise, bias, clip, params}")
    critic: dict = option({}, "privileged observation terms only the critic sees (with critic.privileged: true)")
    rewards: dict = option({}, "reward terms: name -> {weight, params}; reward = sum(weight * term) * control period")
    rewards_per_second: bool = option(
        True,
        "weights are per second: the weighted sum is multiplied by the control period (Isaac Lab's and "
        "mjlab's convention); false: per step (an off-policy learner's critics prefer rewards near 1 per step)",
    )
    terminations: dict = option({}, "termination terms: name -> {params}; the time limit truncates instead")
    success: dict = option(
        {},
        "at most one success term: name -> {params}: the episode's success (info is_success, env/success), read by "
        "the success reward and termination",
    )
    scene: SceneConfig = option(SceneConfig(), "a table and the objects on it (manipulation tasks)")
    command_curriculum: CommandCurriculumConfig = option(
        CommandCurriculumConfig(), "a velocity command's ranges widen from a share of their final size as it tracks"
    )
    terrain: TerrainConfig = option(
        TerrainConfig(), "generated terrain for a legged robot: a grid of tiles by type and level, with a curriculum"
    )
    link: LinkConfig = option(
        LinkConfig(), "late and lost measurements, as a robot computer's link delivers them (latency ticks, drop)"
    )
    expert: str = option(
        "",
        "the task's scripted expert (robopt collect --expert CONFIG): lift, place or push_t ('' = none)",
        ("", "lift", "place", "push_t"),
    )
    reset: dict = option(
        {},
        "reset spread: joint_pos [lo, hi] (rad, added), base_yaw (rad, +-), base_xy (m, +-), base_velocity "
        "(m/s and rad/s, +-)",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.episode_s, float) or not 0 < self.episode_s < math.inf:
            raise ValueError(f"episode_s must be a positive number of seconds, got {self.episode_s!r}")
        parse_task_terms(self)
        parse_command(self.commands)
        for key, value in self.reset.items():
            if key not in RESET_KEYS:
                raise ValueError(f"reset.{key}: unknown key; allowed: {', '.join(RESET_KEYS)}")
            if key == "joint_pos":
                ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(_finite(v) for v in value)
                if not ok or value[0] > value[1]:
                    raise ValueError(f"reset.joint_pos: expected [low, high] (rad) with low <= high, got {value!r}")
            elif not _finite(value) or value < 0:
                raise ValueError(f"reset.{key}: expected a number >= 0, got {value!r}")


def _finite(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def parse_task_terms(task: TaskConfig) -> dict:
    """The parsed terms of a task by section (observations, critic, rewards, terminations); ValueError on a bad one.

    Keys in messages are relative to the ``task`` section (the config layer adds ``task.``).
    """
    return {
        "observations": parse_terms("observation", "observations", task.observations, REGISTRY["observation"]),
        "critic": parse_terms("observation", "critic", task.critic, REGISTRY["observation"]),
        "rewards": parse_terms("reward", "rewards", task.rewards, REGISTRY["reward"]),
        "terminations": parse_terms("termination", "terminations", task.terminations, REGISTRY["termination"]),
        "success": _success_terms(task),
    }


def _success_terms(task: TaskConfig):
    terms = parse_terms("success", "success", task.success, REGISTRY["success"])
    if len(terms) > 1:
        raise ValueError(f"success: one success term per task, got {', '.join(t.name for t in terms)}")
    return terms


def robot_env_options(config) -> dict:
    """``robot=`` and ``task=`` for the env of ``env.id: robot``; a robot or task given to another env is an error."""
    robot, task = config.robot, config.task
    if config.env.id != ROBOT_ENV_ID:
        if robot.mjcf or task != TaskConfig():
            raise ConfigError(f"the robot and task sections build env.id: {ROBOT_ENV_ID}, not env.id={config.env.id!r}")
        return {}
    if not robot.mjcf:
        raise ConfigError(f"env.id: {ROBOT_ENV_ID} needs robot.mjcf (a path, robopt:<name> or menagerie:<dir>/<file>)")
    return {"robot": robot, "task": task}


def migrate_task(data: dict) -> dict:
    """A run config saved before the task lost its own observation window: ``task.history`` goes (1 was the default;
    a run that stacked K > 1 frames there cannot be rebuilt as it was: one line saying what replaces it)."""
    task = data.get("task")
    if not isinstance(task, dict) or "history" not in task:
        return data
    if task["history"] not in (1, None):
        raise ConfigError(
            f"this run used task.history={task['history']}, the task-level window robopt no longer has; its policy "
            "cannot be rebuilt: train again with policy.history (the one window the export and the runtime share)"
        )
    return {**data, "task": {key: value for key, value in task.items() if key != "history"}}
