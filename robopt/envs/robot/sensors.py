"""Sites and sensors the builder adds for the terms: an IMU, the feet, contact groups, the end effector.

Each group's sensors stand side by side in ``sensordata``; ``Sensors.slices`` gives each group's slice of it
(``RobotModel.sensors``), which ``robopt.envs.robot.signals.Signals`` reads.
"""

from __future__ import annotations

import re

import mujoco

from robopt.envs.robot.config import RobotConfig
from robopt.envs.robot.mjcf import match_all, names_of

_CONTACT_FOUND, _CONTACT_FORCE, _REDUCE_NETFORCE = 1, 2, 3  # mjSENS_CONTACT's data bits and reduction


def contact_key(bodies: tuple[str, ...]) -> str:
    """The sensor-group name of a contact group (the regular expressions of its bodies)."""
    return "contact:" + "|".join(bodies)


class Sensors:
    """Sensors added in groups; after compiling, each group's slice of ``sensordata``."""

    def __init__(self, spec: mujoco.MjSpec) -> None:
        self.spec, self.groups = spec, {}

    def add(self, group: str, kind: str, objtype: mujoco.mjtObj, objname: str, intprm=None, **ref) -> None:
        name = f"robopt_{group}_{len(self.groups.get(group, []))}".replace(":", "_").replace("|", "_")
        sensor = self.spec.add_sensor(
            name=name, type=getattr(mujoco.mjtSensor, kind), objtype=objtype, objname=objname, **ref
        )
        if intprm is not None:
            sensor.intprm = list(intprm) + [0] * (len(sensor.intprm) - len(intprm))
        self.groups.setdefault(group, []).append(name)

    def slices(self, model: mujoco.MjModel) -> dict[str, slice]:
        out = {}
        for group, names in self.groups.items():
            ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name) for name in names]
            start = int(model.sensor_adr[ids[0]])
            stop = int(model.sensor_adr[ids[-1]] + model.sensor_dim[ids[-1]])
            assert stop - start == int(model.sensor_dim[ids].sum()), f"sensor group {group} is not contiguous"
            out[group] = slice(start, stop)
        return out


def site_on(spec: mujoco.MjSpec, model: mujoco.MjModel, body: int, name: str, pos=(0.0, 0.0, 0.0)) -> str:
    body_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)
    spec.body(body_name).add_site(name=name, pos=list(pos), size=[0.005, 0.005, 0.005], group=4)
    return name


def add_imu(spec, model, config: RobotConfig, base: int, sensors: Sensors) -> None:
    """An IMU (orientation, gyro, velocimeter) at ``robot.imu`` or a site added at the base's origin."""
    sites = names_of(model, mujoco.mjtObj.mjOBJ_SITE, model.nsite)
    if config.imu:
        if config.imu not in sites:
            raise ValueError(
                f"robot.imu={config.imu!r}: no such site; sites: {', '.join(s for s in sites if s) or '(none)'}"
            )
        site = config.imu
    else:
        site = site_on(spec, model, base, "robopt_imu")
    site_type = mujoco.mjtObj.mjOBJ_SITE
    sensors.add("imu_quat", "mjSENS_FRAMEQUAT", site_type, site)
    sensors.add("imu_gyro", "mjSENS_GYRO", site_type, site)
    sensors.add("imu_linvel", "mjSENS_VELOCIMETER", site_type, site)


def add_feet(spec, model, config: RobotConfig, floor, sensors: Sensors) -> tuple[list[str], list[float]]:
    """A site, world position and velocity and a contact (found, net force) per foot geom or body; with ``floor``
    (the ground geom's name, or a sensor reference: {reftype, refname}) only the contacts with the ground."""
    if not config.feet:
        return [], []
    geoms = names_of(model, mujoco.mjtObj.mjOBJ_GEOM, model.ngeom)
    bodies = names_of(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody)
    names, radii, sites, kinds = [], [], [], []
    for pattern in config.feet:
        regex = re.compile(pattern)
        geom_hits = [i for i, name in enumerate(geoms) if name and regex.fullmatch(name)]
        body_hits = [i for i, name in enumerate(bodies) if name and i > 0 and regex.fullmatch(name)]
        if not geom_hits and not body_hits:
            listed = ", ".join(n for n in geoms if n) or "(none named)"
            raise ValueError(f"robot.feet: {pattern!r} matches no geom or body; geoms: {listed}")
        for index in geom_hits or body_hits:
            if geom_hits:
                name, objtype = geoms[index], mujoco.mjtObj.mjOBJ_GEOM
                body, pos = int(model.geom_bodyid[index]), model.geom_pos[index]
                sphere_like = int(model.geom_type[index]) in (
                    int(mujoco.mjtGeom.mjGEOM_SPHERE),
                    int(mujoco.mjtGeom.mjGEOM_CAPSULE),
                )
                radii.append(float(model.geom_size[index, 0]) if sphere_like else 0.0)
            else:
                name, objtype, body, pos = bodies[index], mujoco.mjtObj.mjOBJ_BODY, index, (0.0, 0.0, 0.0)
                radii.append(0.0)
            sites.append(site_on(spec, model, body, f"robopt_foot_{len(names)}", pos))
            names.append(name)
            kinds.append(objtype)
    for site in sites:  # each group's sensors side by side in sensordata
        sensors.add("feet_pos", "mjSENS_FRAMEPOS", mujoco.mjtObj.mjOBJ_SITE, site)
    for site in sites:
        sensors.add("feet_vel", "mjSENS_FRAMELINVEL", mujoco.mjtObj.mjOBJ_SITE, site)
    ref = floor if isinstance(floor, dict) else {"reftype": mujoco.mjtObj.mjOBJ_GEOM, "refname": floor} if floor else {}
    for name, objtype in zip(names, kinds, strict=True):
        sensors.add(
            "feet_contact",
            "mjSENS_CONTACT",
            objtype,
            name,
            (_CONTACT_FOUND | _CONTACT_FORCE, _REDUCE_NETFORCE, 1),
            **ref,
        )
    return names, radii


def add_contact_groups(spec, model, groups, feet: list[str], sensors: Sensors) -> None:
    """One contact sensor (number of contacts) per colliding geom of the bodies of each group (body regular
    expressions), the feet left out: a foot geom inside a calf body touches the floor at every step."""
    bodies = names_of(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody)
    geoms = names_of(model, mujoco.mjtObj.mjOBJ_GEOM, model.ngeom)
    for group, key in groups.items():
        hits = match_all(key, group, [name if i > 0 else "" for i, name in enumerate(bodies)], "body")
        matched = {index for indices in hits.values() for index in indices}
        for geom in range(model.ngeom):
            colliding = model.geom_contype[geom] or model.geom_conaffinity[geom]
            if model.geom_bodyid[geom] not in matched or not colliding or (geoms[geom] and geoms[geom] in feet):
                continue
            name = geoms[geom] or _name_geom(spec, model, geom)
            sensors.add(
                contact_key(tuple(group)), "mjSENS_CONTACT", mujoco.mjtObj.mjOBJ_GEOM, name, (_CONTACT_FOUND, 0, 1)
            )
        if contact_key(tuple(group)) not in sensors.groups:
            raise ValueError(f"{key}: bodies {list(group)} have no colliding geoms besides the feet")


def _name_geom(spec, model, geom: int) -> str:
    """Name an unnamed geom of the spec (the spec's geoms are in the model's order) so a sensor can refer to it."""
    name = f"robopt_geom_{geom}"
    spec.geoms[geom].name = name
    return name


def add_end_effector(spec, model, config: RobotConfig, sensors: Sensors) -> None:
    """World position and orientation of ``robot.end_effector`` (a site, or a body's origin)."""
    sites = names_of(model, mujoco.mjtObj.mjOBJ_SITE, model.nsite)
    bodies = names_of(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody)
    name = config.end_effector
    if name in sites:
        site = name
    elif name in bodies[1:]:
        site = site_on(spec, model, bodies.index(name), "robopt_end_effector")
    else:
        raise ValueError(
            f"robot.end_effector={name!r}: no such site or body; sites: {', '.join(s for s in sites if s) or '(none)'}"
        )
    sensors.add("ee_pos", "mjSENS_FRAMEPOS", mujoco.mjtObj.mjOBJ_SITE, site)
    sensors.add("ee_quat", "mjSENS_FRAMEQUAT", mujoco.mjtObj.mjOBJ_SITE, site)


def add_grasp(spec, model, fingers: list[int], objects: list[str], sensors: Sensors) -> None:
    """Per object, a contact sensor (found, net force) between each finger body and the object's subtree (an MJCF
    object's geoms sit in a child body of its free body): group ``grasp:<object>``, [F * 4] in sensordata."""
    for obj in objects:
        for finger in fingers:
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, finger)
            sensors.add(
                f"grasp:{obj}",
                "mjSENS_CONTACT",
                mujoco.mjtObj.mjOBJ_BODY,
                name,
                (_CONTACT_FOUND | _CONTACT_FORCE, _REDUCE_NETFORCE, 1),
                reftype=mujoco.mjtObj.mjOBJ_XBODY,
                refname=obj,
            )
