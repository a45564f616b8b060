"""The ``scene`` of a robot task: a table and the objects on it, added to the robot's model through ``mujoco.MjSpec``.

Shapes: N envs, M rows being reset, O objects.

``scene.table`` is a box whose top is at ``height`` (m), centred at ``center`` (x, y) with half extents ``size``.
``scene.objects`` maps a name to an object: a primitive (``box``: half extents x y z; ``cylinder``: radius, half
height; ``capsule``: radius, half length of its straight part, lying on the table; ``sphere``: radius; ``t_block``:
the Push-T block, two boxes, the bar's half length and half width, the stem's half length, and the half height, the
stem pointing along -y of the block's frame) or an MJCF file (``shape: mjcf``, ``file``: its first body becomes the
object, with the file's own masses), each with ``mass`` (kg, a primitive's), ``friction`` and a free joint. A task
without objects has no scene (no table either). At every reset its pose is drawn from ``pose``: x, y
[low, high] (m, in the world; the robot's base is the world's origin for a fixed arm), yaw [low, high] (rad); it
rests on the table (its lowest point at the table top). Each range must lie on the table, or the object would start
in the air: a one-line error names the key. Targets are commands (``task.commands.type: target``), not bodies: a video
draws the object's outline there (``TermTask.render_targets``), seen from ``table_view``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import mujoco
import torch

from robopt.envs.render import CameraView
from robopt.options import NON_NEGATIVE, POSITIVE, low_high, option

SHAPES = {"box": 3, "cylinder": 2, "capsule": 2, "sphere": 1, "t_block": 4, "mjcf": 0}  # shape -> sizes it takes
OBJECT_KEYS = ("shape", "size", "mass", "friction", "file", "pose", "rgba")
POSE_KEYS = ("x", "y", "yaw")


@dataclass(frozen=True)
class TableConfig:
    size: tuple[float, ...] = option((0.3, 0.4), "half extents x, y of the table top (m)", check=POSITIVE)
    center: tuple[float, ...] = option((0.5, 0.0), "x, y of the table top's centre (m)")
    height: float = option(0.0, "height of the table top (m)")
    friction: float = option(1.0, "the table's sliding friction", check=NON_NEGATIVE)

    def __post_init__(self) -> None:
        if len(self.size) != 2 or len(self.center) != 2:
            raise ValueError(f"table.size and table.center take x and y, got {list(self.size)}, {list(self.center)}")


@dataclass(frozen=True)
class SceneConfig:
    table: TableConfig = option(TableConfig(), "the table the objects stand on")
    objects: dict = option(
        {},
        "name -> {shape: box|cylinder|capsule|sphere|t_block|mjcf, size, mass, friction, file, pose: {x, y, yaw}, "
        "rgba}: objects on the table, each with a free joint, its pose drawn at every reset",
    )

    def __post_init__(self) -> None:
        parse_objects(self)


@dataclass(frozen=True)
class SceneObject:
    """An object of the scene, parsed: its geometry, and the pose ranges of its reset."""

    name: str
    shape: str
    size: tuple[float, ...]
    mass: float
    friction: float
    file: str
    x: tuple[float, float]
    y: tuple[float, float]
    yaw: tuple[float, float]
    rgba: tuple[float, ...]

    @property
    def rest_height(self) -> float:
        """Height of the object's origin above the table top when it rests there (m)."""
        if self.shape == "box":
            return self.size[2]
        if self.shape == "cylinder":
            return self.size[1]
        if self.shape in ("capsule", "sphere"):
            return self.size[0]
        if self.shape == "t_block":
            return self.size[3]
        return 0.0  # mjcf: its body's origin at the table top; the file places its geoms above it


def _numbers(key: str, value, count: int, check=POSITIVE) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != count:
        raise ValueError(f"{key}: expected {count} number(s), got {value!r}")
    return tuple(float(check.check(f"{key}[{i}]", v)) for i, v in enumerate(value))


def parse_object(name: str, entry, table: TableConfig) -> SceneObject:
    """One entry of ``scene.objects``; ValueError naming the key (relative to the ``scene`` section)."""
    key = f"objects.{name}"
    if not isinstance(entry, dict):
        raise ValueError(f"{key}: expected a mapping of {', '.join(OBJECT_KEYS)}, got {entry!r}")
    unknown = [k for k in entry if k not in OBJECT_KEYS]
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: unknown key; allowed: {', '.join(OBJECT_KEYS)}")
    shape = entry.get("shape", "box")
    if shape not in SHAPES:
        raise ValueError(f"{key}.shape: {shape!r} is not a shape; allowed: {', '.join(SHAPES)}")
    file = str(entry.get("file", ""))
    if shape == "mjcf":
        if not file:
            raise ValueError(f"{key}.file: shape mjcf needs the object's MJCF file")
        if not Path(file).is_file():
            raise ValueError(f"{key}.file: no such file {file!r}")
        size: tuple[float, ...] = ()
    else:
        size = _numbers(f"{key}.size", entry.get("size", [0.02] * SHAPES[shape]), SHAPES[shape])
    mass = float(POSITIVE.check(f"{key}.mass", entry.get("mass", 0.1)))
    friction = float(NON_NEGATIVE.check(f"{key}.friction", entry.get("friction", 1.0)))
    rgba = _numbers(f"{key}.rgba", entry.get("rgba", [0.85, 0.25, 0.2, 1.0]), 4, NON_NEGATIVE)
    pose = entry.get("pose", {}) or {}
    if not isinstance(pose, dict) or set(pose) - set(POSE_KEYS):
        bad = sorted(set(pose) - set(POSE_KEYS)) if isinstance(pose, dict) else [pose]
        raise ValueError(f"{key}.pose: unknown key {bad[0]!r}; allowed: {', '.join(POSE_KEYS)}")
    center, half = table.center, table.size
    x = low_high(f"{key}.pose.x", pose.get("x", [center[0], center[0]]))
    y = low_high(f"{key}.pose.y", pose.get("y", [center[1], center[1]]))
    yaw = low_high(f"{key}.pose.yaw", pose.get("yaw", [0.0, 0.0]))
    for axis, (low, high) in (("x", x), ("y", y)):
        index = 0 if axis == "x" else 1
        lo, hi = center[index] - half[index], center[index] + half[index]
        if low < lo or high > hi:
            raise ValueError(f"{key}.pose.{axis}: [{low}, {high}] leaves the table ([{lo:.4g}, {hi:.4g}] m)")
    return SceneObject(name, shape, size, mass, friction, file, x, y, yaw, rgba)


def parse_objects(scene: SceneConfig) -> tuple[SceneObject, ...]:
    if not isinstance(scene.objects, dict):
        raise ValueError(f"objects: expected a mapping of names to objects, got {scene.objects!r}")
    return tuple(parse_object(str(name), entry, scene.table) for name, entry in scene.objects.items())


def _primitive(body, obj: SceneObject) -> None:
    """The object's geoms on its body, its mass given to them (the T block's split by volume)."""
    common = {
        "friction": [obj.friction, 0.01, 0.0001],
        "condim": 4,
        "rgba": list(obj.rgba),
        "contype": 1,
        "conaffinity": 1,
    }
    geom = mujoco.mjtGeom
    if obj.shape == "box":
        body.add_geom(name=obj.name, type=geom.mjGEOM_BOX, size=list(obj.size), mass=obj.mass, **common)
    elif obj.shape == "cylinder":
        body.add_geom(name=obj.name, type=geom.mjGEOM_CYLINDER, size=[*obj.size, 0.0], mass=obj.mass, **common)
    elif obj.shape == "sphere":
        body.add_geom(name=obj.name, type=geom.mjGEOM_SPHERE, size=[obj.size[0], 0, 0], mass=obj.mass, **common)
    elif obj.shape == "capsule":  # lying along x
        radius, half = obj.size
        body.add_geom(
            name=obj.name,
            type=geom.mjGEOM_CAPSULE,
            fromto=[-half, 0, 0, half, 0, 0],
            size=[radius, 0.0, 0.0],
            mass=obj.mass,
            **common,
        )
    else:  # t_block: the bar along x at +y, the stem along y below it
        bar, width, stem, height = obj.size
        bar_volume, stem_volume = bar * width, width * stem
        share = bar_volume / (bar_volume + stem_volume)
        body.add_geom(
            name=f"{obj.name}_bar",
            type=geom.mjGEOM_BOX,
            size=[bar, width, height],
            pos=[0.0, stem + width, 0.0],
            mass=obj.mass * share,
            **common,
        )
        body.add_geom(
            name=f"{obj.name}_stem",
            type=geom.mjGEOM_BOX,
            size=[width, stem, height],
            pos=[0.0, 0.0, 0.0],
            mass=obj.mass * (1.0 - share),
            **common,
        )


def add_scene(spec: mujoco.MjSpec, scene: SceneConfig) -> tuple[SceneObject, ...]:
    """The table and the objects, added to ``spec`` (each object a body with a free joint named ``<name>``)."""
    objects = parse_objects(scene)
    table = scene.table
    thickness = 0.025
    spec.worldbody.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[*table.size, thickness],
        pos=[*table.center, table.height - thickness],
        friction=[table.friction, 0.01, 0.0001],
        contype=1,
        conaffinity=1,
        rgba=[0.55, 0.45, 0.35, 1.0],
    )
    for obj in objects:
        body = spec.worldbody.add_body(name=obj.name, pos=[*table.center, table.height + obj.rest_height])
        body.add_freejoint(name=obj.name)
        if obj.shape == "mjcf":
            child = mujoco.MjSpec.from_file(obj.file)
            frame = body.add_frame()
            frame.attach_body(child.worldbody.first_body(), f"{obj.name}/", "")
        else:
            _primitive(body, obj)
    return objects


@dataclass(frozen=True)
class ObjectTables:
    """Where the scene's objects live in the compiled model's state (tensors on CPU; index per object)."""

    names: tuple[str, ...]
    objects: tuple[SceneObject, ...]
    pos_index: torch.Tensor  # [O, 3] long: qpos of each free joint's position
    quat_index: torch.Tensor  # [O, 4] long: ... and of its quaternion
    lin_index: torch.Tensor  # [O, 3] long: qvel of its linear velocity (world frame)
    ang_index: torch.Tensor  # [O, 3] long: ... and of its angular velocity (body frame)
    rest_z: torch.Tensor  # [O] float64: the height of each object's origin when it rests on the table
    table_height: float
    table_low: torch.Tensor  # [2] x, y of the table top's corners
    table_high: torch.Tensor  # [2]


def object_tables(model: mujoco.MjModel, objects: tuple[SceneObject, ...], table: TableConfig) -> ObjectTables:
    joints = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, obj.name) for obj in objects]
    center, half = torch.tensor(table.center, dtype=torch.float64), torch.tensor(table.size, dtype=torch.float64)
    qpos = torch.tensor([int(model.jnt_qposadr[j]) for j in joints], dtype=torch.long)[:, None]
    dof = torch.tensor([int(model.jnt_dofadr[j]) for j in joints], dtype=torch.long)[:, None]
    return ObjectTables(
        names=tuple(obj.name for obj in objects),
        objects=objects,
        pos_index=qpos + torch.arange(3),
        quat_index=qpos + 3 + torch.arange(4),
        lin_index=dof + torch.arange(3),
        ang_index=dof + 3 + torch.arange(3),
        rest_z=torch.tensor([table.height + obj.rest_height for obj in objects], dtype=torch.float64),
        table_height=table.height,
        table_low=center - half,
        table_high=center + half,
    )


def table_view(objects: ObjectTables, base_pos: torch.Tensor) -> CameraView:
    """A video's view of the table: from across the table, 30 degrees to the side of the line to the robot's base
    and 30 degrees above the top, far enough for the whole top (and a gripper above it) to stay in the frame."""
    center = (objects.table_low + objects.table_high) / 2
    half = float((objects.table_high - objects.table_low).max()) / 2
    toward_base = math.degrees(math.atan2(float(base_pos[1] - center[1]), float(base_pos[0] - center[0])))
    lookat = (float(center[0]), float(center[1]), objects.table_height + 0.08)
    return CameraView(lookat=lookat, distance=1.3 * half + 0.65, elevation=-30.0, azimuth=toward_base + 30.0)
