"""A robot's model from its description and the ``robot`` config: ``mujoco.MjSpec`` edits, then index tables.

Shapes: A actuated joints, F feet, Q = nq.

``build_robot`` loads the MJCF (or URDF), compiles it once as it is (MuJoCo's own errors: a missing mesh, a bad
element), then edits the spec: physics options; the floor (unless the description has a ground plane, or
``floor.type: none``); robopt's actuators on the actuated joints (unless the description's are kept); an IMU site
and its sensors on a floating base; a site and sensors per foot; contact sensors for the bodies that terms watch;
the end effector's pose sensors; a camera that follows the robot, a light and a grid texture for videos. The
compiled model goes to the existing backends unchanged.

Actuators (``action: joint_position``): a PD servo whose target is ``default + scale * action``, written as
MuJoCo's affine actuator so that ctrl is the policy's action itself: force = kp * scale * ctrl + kp * default -
kp * q - kd * qdot (gainprm[0] = kp * scale, biasprm[:3] = (kp * default, -kp, -kd)), clamped to +-effort, ctrl
limited to the actions whose targets lie in the joint's range. MuJoCo evaluates it at every physics step
(``implicitfast`` integrates the damping implicitly). ``joint_effort``: a motor, torque = scale * action, ctrl
limited to +-effort / scale.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from robopt.envs.robot.config import RobotConfig
from robopt.envs.robot.mirror import build_mirror
from robopt.envs.robot.mjcf import compile_spec, load_spec, match_all, movable, names_of, resolve_mjcf
from robopt.envs.robot.model import GripperTables, RobotModel
from robopt.envs.robot.scene import SceneConfig, add_scene, object_tables
from robopt.envs.robot.sensors import Sensors, add_contact_groups, add_end_effector, add_feet, add_grasp, add_imu
from robopt.envs.robot.terrain import BODY as TERRAIN_BODY
from robopt.envs.robot.terrain import TerrainConfig, add_terrain

_INTEGRATORS = {"euler": "mjINT_EULER", "implicit": "mjINT_IMPLICIT", "implicitfast": "mjINT_IMPLICITFAST",
                "rk4": "mjINT_RK4"}  # fmt: skip
_SOLVERS = {"newton": "mjSOL_NEWTON", "cg": "mjSOL_CG", "pgs": "mjSOL_PGS"}
_CONES = {"pyramidal": "mjCONE_PYRAMIDAL", "elliptic": "mjCONE_ELLIPTIC"}


def _joint_settings(config: RobotConfig, model: mujoco.MjModel) -> tuple[list[int], dict[int, dict]]:
    """The actuated joints (model order) and each one's settings; a joint matched twice is a ValueError."""
    names = names_of(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    matched = match_all("robot.joints", config.joints, movable(model, names), "hinge or slide joint")
    settings: dict[int, dict] = {}
    for pattern, hits in matched.items():
        for joint in hits:
            if joint in settings:
                raise ValueError(
                    f"robot.joints: joint {names[joint]!r} matches {settings[joint]['pattern']!r} "
                    f"and {pattern!r}; make the patterns disjoint"
                )
            settings[joint] = {**config.joints[pattern], "pattern": pattern}
    return sorted(settings), settings


def _gripper(config: RobotConfig, model: mujoco.MjModel, settings: dict, qpos0: np.ndarray) -> dict[int, float]:
    """The gripper's driven joint joins the actuated ones (its servo centred between open and closed, one action
    unit either way); every finger starts open. Returns the driven joint's servo centre by joint id."""
    gripper = config.gripper
    names = names_of(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    drivable = movable(model, names)
    ids = []
    for name in gripper.joints:
        if name not in drivable:
            listed = ", ".join(n for n in drivable if n) or "(none)"
            raise ValueError(
                f"robot.gripper.joints: {name!r} is not a hinge or slide joint of the model; joints: {listed}"
            )
        joint = names.index(name)
        if joint in settings:
            raise ValueError(
                f"robot.gripper.joints: {name!r} is also matched by robot.joints pattern "
                f"{settings[joint]['pattern']!r}; the gripper drives its fingers itself"
            )
        low, high = model.jnt_range[joint]
        for key in ("open", "closed"):
            value = getattr(gripper, key)
            if model.jnt_limited[joint] and not low - 1e-9 <= value <= high + 1e-9:
                raise ValueError(f"robot.gripper.{key}={value} is outside {name}'s range [{low:.4g}, {high:.4g}]")
        qpos0[model.jnt_qposadr[joint]] = gripper.open
        ids.append(joint)
    driven = ids[0]
    scale = (gripper.open - gripper.closed) / 2.0
    settings[driven] = {
        "kp": gripper.kp,
        "kd": gripper.kd,
        "effort": gripper.effort,
        "scale": scale,
        "pattern": "gripper",
    }
    return {driven: (gripper.open + gripper.closed) / 2.0}


def _couple_fingers(spec: mujoco.MjSpec, config: RobotConfig) -> None:
    """Each finger after the first follows it: q_other = q_first (a joint equality; mirrored axes close both)."""
    first, *others = config.gripper.joints
    for other in others:
        spec.add_equality(
            name=f"robopt_gripper_{other}",
            type=mujoco.mjtEq.mjEQ_JOINT,
            name1=other,
            name2=first,
            data=[0.0, 1.0] + [0.0] * 10,
        )


def _default_pose(config: RobotConfig, model: mujoco.MjModel) -> np.ndarray:
    """qpos0 with the joints of ``default_pose`` set; a value outside a limited joint's range is a ValueError."""
    qpos = model.qpos0.copy()
    names = names_of(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    drivable = movable(model, names)
    for pattern, hits in match_all("robot.default_pose", config.default_pose, drivable, "hinge or slide joint").items():
        value = float(config.default_pose[pattern])
        for joint in hits:
            low, high = model.jnt_range[joint]
            if model.jnt_limited[joint] and not low <= value <= high:
                raise ValueError(
                    f"robot.default_pose: {names[joint]}={value} is outside its range [{low:.4g}, {high:.4g}]"
                )
            qpos[model.jnt_qposadr[joint]] = value
    return qpos


def _base(config: RobotConfig, model: mujoco.MjModel) -> int:
    """The base body: ``robot.base`` or the world's first child."""
    names = names_of(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody)
    if not config.base:
        children = [i for i in range(1, model.nbody) if model.body_parentid[i] == 0]
        if not children:
            raise ValueError("robot.mjcf: the model has no body under the world")
        return children[0]
    if config.base not in names[1:]:
        raise ValueError(f"robot.base={config.base!r}: no such body; bodies: {', '.join(n for n in names[1:] if n)}")
    return names.index(config.base)


def _free_joint(model: mujoco.MjModel, base: int) -> int:
    """The base's free joint id, or -1."""
    for joint in range(model.njnt):
        if model.jnt_bodyid[joint] == base and int(model.jnt_type[joint]) == int(mujoco.mjtJoint.mjJNT_FREE):
            return joint
    return -1


def _set_options(spec: mujoco.MjSpec, config: RobotConfig) -> None:
    sim = config.sim
    spec.option.timestep = sim.timestep
    spec.option.integrator = getattr(mujoco.mjtIntegrator, _INTEGRATORS[sim.integrator])
    spec.option.solver = getattr(mujoco.mjtSolver, _SOLVERS[sim.solver])
    spec.option.cone = getattr(mujoco.mjtCone, _CONES[sim.cone])
    spec.option.iterations = sim.iterations
    spec.option.ls_iterations = sim.ls_iterations


def _add_floor(spec: mujoco.MjSpec, model: mujoco.MjModel, config: RobotConfig, terrain: bool) -> str:
    """The floor geom's name: the description's own ground plane, a new infinite plane, or '' for none (or for a
    ``terrain``, which the caller adds: this adds its lights and sky)."""
    for geom in range(model.ngeom):
        if model.geom_bodyid[geom] == 0 and int(model.geom_type[geom]) == int(mujoco.mjtGeom.mjGEOM_PLANE):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom)
            if not name:
                raise ValueError("robot.mjcf: the description's ground plane has no name; name it for the terms")
            if terrain:
                raise ValueError(f"task.terrain: the description has its own ground plane {name!r}; remove it")
            return name
    if config.floor.type == "none" and not terrain:
        return ""
    spec.add_texture(
        name="robopt_grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.38, 0.42, 0.47],
        rgb2=[0.52, 0.56, 0.6],
        width=256,
        height=256,
        mark=mujoco.mjtMark.mjMARK_EDGE,
        markrgb=[0.7, 0.7, 0.7],
    )
    material = spec.add_material(name="robopt_grid", texrepeat=[1, 1], texuniform=True, reflectance=0.05)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "robopt_grid"  # 0.5 m squares, however far it walks
    spec.add_texture(
        name="robopt_sky",
        type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
        rgb1=[0.55, 0.7, 0.85],
        rgb2=[0.1, 0.12, 0.15],
        width=256,
        height=256,
    )
    spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    spec.visual.headlight.diffuse = [0.55, 0.55, 0.55]
    if not terrain:
        spec.worldbody.add_geom(
            name="floor",
            type=mujoco.mjtGeom.mjGEOM_PLANE,
            size=[0, 0, 0.05],
            friction=[config.floor.friction, 0.005, 0.0001],
            material="robopt_grid",
            contype=1,
            conaffinity=1,
            condim=3,
        )
    spec.worldbody.add_light(
        name="robopt_light",
        pos=[0, 0, 4],
        dir=[0, 0, -1],
        diffuse=[0.6, 0.6, 0.6],
        castshadow=False,
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
    )
    return "" if terrain else "floor"


def _add_actuators(
    spec, model, config: RobotConfig, joints: list[int], settings: dict, qpos0: np.ndarray, centres: dict
) -> dict:
    """robopt's actuators on ``joints`` (see the module doc); returns their per-joint tables. ``centres``: a servo
    centre other than the default pose by joint (the gripper's, between open and closed)."""
    for actuator in list(spec.actuators):
        spec.delete(actuator)
    table = {key: [] for key in ("scale", "offset", "kp", "kd", "effort")}
    for joint in joints:
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint)
        entry, joint_spec = settings[joint], spec.joint(name)
        for key in ("armature", "damping", "frictionloss"):
            if key in entry:
                setattr(joint_spec, key, float(entry[key]))
        scale, effort = float(entry.get("scale", config.action_scale)), float(entry.get("effort", 0.0))
        actuator = spec.add_actuator(name=f"{name}_actuator", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        if config.action in ("joint_position", "joint_position_delta"):
            if "kp" not in entry:
                raise ValueError(f"robot.joints.{entry['pattern']}: kp is required for action joint_position")
            kp, kd = float(entry["kp"]), float(entry.get("kd", 0.0))
            default = float(centres.get(joint, qpos0[model.jnt_qposadr[joint]]))
            actuator.gainprm = [kp * scale] + [0.0] * 9
            actuator.biastype = mujoco.mjtBias.mjBIAS_AFFINE
            actuator.biasprm = [kp * default, -kp, -kd] + [0.0] * 7
            if model.jnt_limited[joint]:
                low, high = model.jnt_range[joint]
                actuator.ctrlrange = sorted([(low - default) / scale, (high - default) / scale])
                actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            offset = default
        else:
            if effort <= 0:
                raise ValueError(f"robot.joints.{entry['pattern']}: effort (N m) is required for action joint_effort")
            kp = kd = offset = 0.0
            actuator.gainprm = [scale] + [0.0] * 9
            actuator.ctrlrange = [-effort / scale, effort / scale]
            actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        if effort > 0:
            actuator.forcerange = [-effort, effort]
            actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        for key, value in zip(table, (scale, offset, kp, kd, effort), strict=True):
            table[key].append(value)
    return table


def _native_actuators(model: mujoco.MjModel) -> tuple[list[int], dict]:
    """The description's own actuators, kept: the joints they drive (actuator order); ctrl is the action."""
    joints = []
    for actuator in range(model.nu):
        if int(model.actuator_trntype[actuator]) != int(mujoco.mjtTrn.mjTRN_JOINT):
            raise ValueError(
                "robot.actuators=auto keeps the description's actuators, but actuator "
                f"{actuator} does not drive a joint; use actuators: replace"
            )
        joints.append(int(model.actuator_trnid[actuator, 0]))
    size = len(joints)
    return joints, {
        "scale": [1.0] * size,
        "offset": [0.0] * size,
        "kp": [0.0] * size,
        "kd": [0.0] * size,
        "effort": [0.0] * size,
    }


def _camera(spec, model, base: int, floating: bool) -> None:
    """A ``track`` camera on the base (following its centre of mass when it walks), unless the model has one."""
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0:
        return
    extent = max(float(model.stat.extent), 0.3)
    name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, base)
    mode = mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM if floating else mujoco.mjtCamLight.mjCAMLIGHT_FIXED
    body = spec.body(name) if floating else spec.worldbody
    offset = np.array([0.6, -2.2, 0.9]) * extent  # ahead, to the right and above: looks back at the robot
    z_axis = offset / np.linalg.norm(offset)  # a camera looks along its -z
    x_axis = np.cross([0.0, 0.0, 1.0], z_axis)
    x_axis /= np.linalg.norm(x_axis)
    y_axis = np.cross(z_axis, x_axis)
    body.add_camera(name="track", mode=mode, pos=list(offset), xyaxes=[*x_axis, *y_axis])


def build_robot(
    config: RobotConfig,
    contact_groups: dict | None = None,
    scene: SceneConfig | None = None,
    terrain: TerrainConfig | None = None,
) -> RobotModel:
    """Compile the robot of ``config`` with what its task reads; ValueError (one line, naming the key) on bad input.

    ``contact_groups``: tuples of body regular expressions whose contacts terms count -> the config key that named
    them (for messages; ``robopt.envs.robot.terms.contact_groups``). The end effector's sensors are added when
    ``robot.end_effector`` names one (the terms that need it say so when it does not). ``scene`` (the task's): its
    table and objects, and a contact sensor between each finger of ``robot.gripper`` and each object. ``terrain``
    (the task's, when it names types): the generated terrain instead of the flat floor, for a floating base.
    """
    path = resolve_mjcf(config.mjcf)
    spec = load_spec(path)
    model = compile_spec(spec, path)  # as written: MuJoCo's own errors first
    base = _base(config, model)
    free_joint = _free_joint(model, base)
    qpos0 = _default_pose(config, model)
    centres: dict[int, float] = {}
    if config.actuators == "auto" and model.nu > 0:
        if config.gripper.joints:
            raise ValueError(
                "robot.gripper drives the fingers with robopt's servo, but the description has its own actuators "
                "(kept with actuators: auto); use actuators: replace"
            )
        if config.joints:
            raise ValueError(
                "robot.joints sets gains, but the description has its own actuators (kept with "
                "actuators: auto); use actuators: replace to drive the joints with robopt's"
            )
        joints, table = _native_actuators(model)
        action_type = "native"
    else:
        if not config.joints:
            raise ValueError("robot.joints is empty: name the actuated joints (regular expression -> {kp, kd, effort})")
        joints, settings = _joint_settings(config, model)
        if config.gripper.joints:
            centres = _gripper(config, model, settings, qpos0)
            joints = sorted(settings)
            _couple_fingers(spec, config)
        table = _add_actuators(spec, model, config, joints, settings, qpos0, centres)
        action_type = config.action
    _set_options(spec, config)
    on_terrain = terrain is not None and bool(terrain.types)
    if on_terrain and free_joint < 0:
        raise ValueError("task.terrain needs a robot with a floating base (a free joint on robot.base)")
    floor = _add_floor(spec, model, config, on_terrain)
    terrain_tables = add_terrain(spec, terrain) if on_terrain else None
    ground = {"reftype": mujoco.mjtObj.mjOBJ_BODY, "refname": TERRAIN_BODY} if on_terrain else floor
    sensors = Sensors(spec)
    if free_joint >= 0:
        add_imu(spec, model, config, base, sensors)
    foot_names, foot_radius = add_feet(spec, model, config, ground, sensors)
    add_contact_groups(spec, model, contact_groups or {}, foot_names, sensors)
    if config.end_effector:
        add_end_effector(spec, model, config, sensors)
    if config.gravity_compensation:
        for body in spec.bodies[1:]:
            body.gravcomp = 1.0
    objects = add_scene(spec, scene) if scene is not None and scene.objects else ()  # after: objects have weight
    joint_names = names_of(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    fingers = [int(model.jnt_bodyid[joint_names.index(name)]) for name in config.gripper.joints]
    if fingers and objects:
        add_grasp(spec, model, fingers, [obj.name for obj in objects], sensors)
    _camera(spec, model, base, free_joint >= 0)
    compiled = compile_spec(spec, path)
    robot = _tables(
        config,
        compiled,
        model,
        path,
        joints,
        table,
        action_type,
        base,
        free_joint,
        qpos0,
        foot_names,
        foot_radius,
        sensors.slices(compiled),
    )
    if config.gripper.joints:
        driven = robot.joint_names.index(config.gripper.joints[0])
        gripper = GripperTables(config.gripper.joints, driven, config.gripper.open, config.gripper.closed)
        object.__setattr__(robot, "gripper", gripper)
    if objects:
        object.__setattr__(robot, "objects", object_tables(compiled, objects, scene.table))
    if terrain_tables is not None:
        object.__setattr__(robot, "terrain", terrain_tables)
    if config.mirror:
        qpos = robot.init_qpos.numpy()
        mirror = build_mirror(
            config.mirror, compiled, qpos, base, robot.joint_names, robot.default_pose, robot.action_scale, foot_names
        )
        object.__setattr__(robot, "mirror", mirror)
    return robot


def _tables(
    config,
    compiled,
    original,
    path,
    joints,
    table,
    action_type,
    base,
    free_joint,
    qpos0,
    foot_names,
    foot_radius,
    sensors,
) -> RobotModel:
    """The index tables of the compiled model (joint and body ids are those of the description: edits only add)."""
    joint_names = tuple(mujoco.mj_id2name(original, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints)
    ids = [mujoco.mj_name2id(compiled, mujoco.mjtObj.mjOBJ_JOINT, name) for name in joint_names]
    limited = compiled.jnt_limited[ids].astype(bool)
    joint_range = torch.tensor(np.where(limited[:, None], compiled.jnt_range[ids], [[-np.inf, np.inf]]))
    actuator_of = {int(compiled.actuator_trnid[a, 0]): a for a in range(compiled.nu)}
    qpos_index = torch.tensor(compiled.jnt_qposadr[ids], dtype=torch.long)
    init = torch.tensor(np.concatenate([qpos0, compiled.qpos0[len(qpos0) :]]), dtype=torch.float64)  # + objects
    free_qpos = int(compiled.jnt_qposadr[free_joint]) if free_joint >= 0 else -1
    if free_qpos >= 0:
        quat = init[free_qpos + 3 : free_qpos + 7]
        init[free_qpos + 3 : free_qpos + 7] = quat / quat.norm()
        init[free_qpos + 2] = config.base_height or _standing_height(compiled, init, free_qpos, foot_names)
    data = mujoco.MjData(compiled)
    mujoco.mj_kinematics(compiled, data)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float64)  # noqa: E731
    return RobotModel(
        model=compiled,
        name=path.stem,
        joint_names=joint_names,
        qpos_index=qpos_index,
        dof_index=torch.tensor(compiled.jnt_dofadr[ids], dtype=torch.long),
        actuator_index=torch.tensor([actuator_of[j] for j in ids], dtype=torch.long),
        joint_range=joint_range,
        default_pose=init[qpos_index].clone(),
        action_type=action_type,
        action_scale=as_tensor(table["scale"]),
        action_offset=as_tensor(table["offset"]),
        kp=as_tensor(table["kp"]),
        kd=as_tensor(table["kd"]),
        effort=as_tensor(table["effort"]),
        control_dt=config.sim.timestep * config.sim.decimation,
        decimation=config.sim.decimation,
        free_qpos=free_qpos,
        free_dof=int(compiled.jnt_dofadr[free_joint]) if free_joint >= 0 else -1,
        base_body=base,
        base_world_pos=torch.tensor(data.xpos[base].copy()),
        base_world_quat=torch.tensor(data.xquat[base].copy()),
        foot_names=tuple(foot_names),
        foot_radius=as_tensor(foot_radius),
        end_effector=config.end_effector,
        sensors=sensors,
        init_qpos=init,
    )


def _standing_height(model: mujoco.MjModel, qpos: torch.Tensor, free_qpos: int, foot_names) -> float:
    """The base height that puts the lowest foot (or, without feet, the lowest collision geom) on z = 0."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos.numpy()
    data.qpos[free_qpos + 2] = 0.0
    mujoco.mj_kinematics(model, data)
    terrain = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, TERRAIN_BODY)
    floor_like = [g for g in range(model.ngeom) if model.geom_bodyid[g] in (0, terrain)]
    if foot_names:
        sites = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, f"robopt_foot_{i}") for i in range(len(foot_names))]
        geoms = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name) for name in foot_names]
        radius = [float(model.geom_size[g, 0]) if g >= 0 else 0.0 for g in geoms]
        lowest = min(data.site_xpos[s, 2] - r for s, r in zip(sites, radius, strict=True))
    else:
        colliding = [
            g for g in range(model.ngeom) if g not in floor_like and model.geom_contype[g] | model.geom_conaffinity[g]
        ]
        if not colliding:
            return float(qpos[free_qpos + 2])
        lowest = min(data.geom_xpos[g, 2] - model.geom_rbound[g] for g in colliding)
    return float(-lowest) + 1e-3
