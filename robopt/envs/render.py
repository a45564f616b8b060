"""Offscreen rendering of MuJoCo tasks with a camera that keeps the robot in the frame.

Each task has a ``CameraView``: locomotion robots (HalfCheetah, Hopper, Walker2d, Ant, Humanoid; Swimmer and
HumanoidStandup on Gymnasium) use the ``track`` camera of their Gymnasium MJCF, which MuJoCo moves with the
robot's centre of mass (``mode="trackcom"``); fixed-base tasks (InvertedPendulum, InvertedDoublePendulum,
Reacher, Pusher) use a free camera placed to frame the whole scene. The same views are used for native
``mujoco/<Task>`` envs (``NativeRowRenderer``) and, through ``gymnasium_camera_kwargs``, for Gymnasium's v5
envs, so both backends record the same picture.

Gymnasium 1.x v5 envs ignore their own ``track`` camera unless ``camera_name`` is passed: without it they
render from a free camera fixed at the start position, so a running robot leaves the frame.

Shapes: N envs, Q = nq, V = nv, H image height, W image width.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import mujoco
import numpy as np

DEFAULT_VIDEO_FPS = 30.0  # frames drawn per second of an episode (a video frame rate, not the control rate)
DEFAULT_WIDTH, DEFAULT_HEIGHT = 640, 480  # the models' default offscreen buffer (visual/global offwidth/offheight)


@dataclass(frozen=True)
class CameraView:
    """Where a video is filmed from: a named model camera, or a free camera at fixed coordinates."""

    camera_name: str | None = None
    """Name of a camera in the MJCF (e.g. ``track``, which follows the robot); None for a free camera."""
    lookat: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Free camera: the world point at the image centre (m)."""
    distance: float = 3.0
    """Free camera: distance from ``lookat`` (m)."""
    elevation: float = -20.0
    """Free camera: angle above (negative: looking down on) the horizontal plane (degrees)."""
    azimuth: float = 90.0
    """Free camera: heading in the xy-plane (degrees; 90 looks along +y, as the ``track`` cameras do)."""

    def free_camera_config(self) -> dict:
        """The free camera's settings as ``mujoco.MjvCamera`` attributes (Gymnasium's ``default_camera_config``)."""
        return {
            "lookat": np.array(self.lookat),
            "distance": self.distance,
            "elevation": self.elevation,
            "azimuth": self.azimuth,
        }


_TRACK = CameraView(camera_name="track")
TASK_CAMERAS: dict[str, CameraView] = {
    "HalfCheetah": _TRACK,
    "Hopper": _TRACK,
    "Walker2d": _TRACK,
    "Ant": _TRACK,
    "Humanoid": _TRACK,
    "HumanoidStandup": _TRACK,  # Gymnasium only (no native task yet)
    "Swimmer": _TRACK,  # Gymnasium only; its track camera looks down at 45 degrees
    # the cart slides on a rail from x=-1 to 1 and the pole (0.6 m, or two of them) swings up to +-90 degrees
    "InvertedPendulum": CameraView(lookat=(0.0, 0.0, 0.2), distance=2.4, elevation=-10.0),
    "InvertedDoublePendulum": CameraView(lookat=(0.0, 0.0, 0.5), distance=3.0, elevation=-10.0),
    # the arm (0.21 m reach) and its target stay inside the 0.6 m arena: seen from above
    "Reacher": CameraView(lookat=(0.0, 0.0, 0.0), distance=1.0, elevation=-90.0),
    # the arm's shoulder is at (0, -0.6, 0); the object and goal lie on the table around (0.45, -0.05, -0.3)
    "Pusher": CameraView(lookat=(0.25, -0.3, -0.25), distance=2.2, elevation=-45.0, azimuth=135.0),
}


@dataclass(frozen=True)
class Marker:
    """A shape drawn into a frame but absent from the physics (a target's outline): MuJoCo's ``mjv_initGeom``."""

    type: int
    """``mujoco.mjtGeom`` value (box, sphere...)."""
    size: tuple[float, float, float]
    pos: tuple[float, float, float]
    """World position (m)."""
    mat: tuple[float, ...]
    """World orientation, a row-major 3x3 rotation matrix (9 numbers)."""
    rgba: tuple[float, float, float, float]


def task_camera(task_name: str, model: mujoco.MjModel) -> CameraView:
    """The view for a task (``HalfCheetah``); unknown tasks get the model's ``track`` camera or a whole-scene view."""
    if task_name in TASK_CAMERAS:
        return TASK_CAMERAS[task_name]
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0:
        return _TRACK
    return CameraView(lookat=tuple(float(x) for x in model.stat.center), distance=2.0 * float(model.stat.extent))


def gymnasium_task_name(env_id: str) -> str | None:
    """``HalfCheetah`` for a Gymnasium MuJoCo v5 id such as ``HalfCheetah-v5``; None for other ids."""
    match = re.fullmatch(r"(\w+)-v(\d+)", env_id)
    if match is None or match.group(1) not in TASK_CAMERAS or int(match.group(2)) < 5:
        return None
    return match.group(1)


def gymnasium_camera_kwargs(env_id: str, env_kwargs: dict) -> dict:
    """Extra ``gym.make`` kwargs that film a Gymnasium MuJoCo v5 env with its task's ``CameraView``.

    Returns ``{}`` for other ids (no MuJoCo renderer, or an older version without these options) and when
    ``env_kwargs`` already chooses a camera (``camera_name``, ``camera_id`` or ``default_camera_config``).
    """
    name = gymnasium_task_name(env_id)
    if name is None or {"camera_name", "camera_id", "default_camera_config"} & set(env_kwargs):
        return {}
    view = TASK_CAMERAS[name]
    if view.camera_name is not None:
        return {"camera_name": view.camera_name}
    return {"default_camera_config": view.free_camera_config()}


def _mjv_camera(view: CameraView, model: mujoco.MjModel) -> mujoco.MjvCamera | str:
    if view.camera_name is not None:
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, view.camera_name) < 0:
            raise ValueError(f"the model has no camera named {view.camera_name!r}")
        return view.camera_name
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    for key, value in view.free_camera_config().items():
        if key == "lookat":
            camera.lookat[:] = value
        else:
            setattr(camera, key, value)
    return camera


def endless_ground(model: mujoco.MjModel) -> None:
    """Draw the world's ground planes without an edge, in place (a render-only copy of the model).

    MuJoCo collides with a plane over its whole infinite extent but draws only its ``size``: Gymnasium's
    HalfCheetah floor ends 40 m out, and a fast cheetah ran off it into grey space after about 8 s. Size 0 draws
    a plane to the horizon; its checker texture keeps its size in metres (``texuniform``, repeats per metre).
    """
    for geom in range(model.ngeom):
        if model.geom_bodyid[geom] != 0 or model.geom_type[geom] != mujoco.mjtGeom.mjGEOM_PLANE:
            continue
        half = model.geom_size[geom, :2].copy()
        material = model.geom_matid[geom]
        if material >= 0 and not model.mat_texuniform[material] and (half > 0).all():
            model.mat_texrepeat[material] = model.mat_texrepeat[material] / (2.0 * half)
            model.mat_texuniform[material] = 1
        model.geom_size[geom, :2] = 0.0


TARGET_RGBA = (0.2, 0.8, 0.3, 0.35)  # a target's outline: translucent green


def ghost_markers(model: mujoco.MjModel, data: mujoco.MjData, body: str, pos, mat, rgba=TARGET_RGBA) -> list[Marker]:
    """The geoms of ``body`` (and of the bodies below it) as markers, moved so that the body sits at world ``pos``
    [3] with orientation ``mat`` [9] (row-major): an object's outline at its target. ``data`` holds the current
    state (``mj_forward`` run), from which each geom's place in its body's frame is read."""
    index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
    if index < 0:
        return []
    body_pos, body_mat = data.xpos[index], data.xmat[index].reshape(3, 3)
    to, turn = np.asarray(pos, dtype=np.float64), np.asarray(mat, dtype=np.float64).reshape(3, 3)
    markers = []
    for geom in range(model.ngeom):
        if not _below(model, int(model.geom_bodyid[geom]), index):
            continue
        local_pos = body_mat.T @ (data.geom_xpos[geom] - body_pos)  # the geom in the body's frame
        local_mat = body_mat.T @ data.geom_xmat[geom].reshape(3, 3)
        markers.append(
            Marker(
                int(model.geom_type[geom]),
                tuple(float(x) for x in model.geom_size[geom]),
                tuple(float(x) for x in to + turn @ local_pos),
                tuple(float(x) for x in (turn @ local_mat).reshape(-1)),
                tuple(float(x) for x in rgba),
            )
        )
    return markers


def _below(model: mujoco.MjModel, body: int, ancestor: int) -> bool:
    """Whether ``body`` lies in the subtree of ``ancestor``."""
    while body > 0:
        if body == ancestor:
            return True
        body = int(model.body_parentid[body])
    return False


class NativeRowRenderer:
    """Renders one row of a ``NativeVecEnv`` through a host ``MjData`` and ``mujoco.Renderer``.

    Each ``render`` copies the row's ``qpos``/``qvel`` from ``env.physics.state()`` into the host data of
    the row's model (its private copy when the row has randomized parameters on the ``mujoco`` backend;
    the nominal model on ``mujoco_warp``, whose per-world parameters live on the GPU), runs ``mj_forward``
    (so a ``trackcom`` camera follows the row's own centre of mass) and draws the task's ``CameraView``.
    Needs an OpenGL backend (``MUJOCO_GL=egl`` or ``osmesa`` without a display).
    """

    def __init__(
        self,
        env,
        row: int = 0,
        width: int = DEFAULT_WIDTH,
        height: int = DEFAULT_HEIGHT,
        view: CameraView | None = None,
    ) -> None:
        if not 0 <= row < env.num_envs:
            raise ValueError(f"{env.env_id}: row must be in [0, {env.num_envs}), got {row}")
        self.env, self.row = env, row
        model = copy.copy(env.physics.mj_model)  # the backend's model stays untouched; only its visual size grows
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        endless_ground(model)
        if model.nlight == 0:  # lit by the headlight alone (a robot on a table without a floor): brighter than default
            model.vis.headlight.ambient[:] = np.maximum(model.vis.headlight.ambient, 0.35)
            model.vis.headlight.diffuse[:] = np.maximum(model.vis.headlight.diffuse, 0.6)
        self.render_model = model  # what is drawn: the backend's model with an endless ground and a larger buffer
        task_view = getattr(env.task, "camera_view", None)  # a task may frame itself (a robot's table and objects)
        self.view = view or (task_view() if callable(task_view) else None) or task_camera(env.task.name, model)
        self.camera = _mjv_camera(self.view, model)  # what update_scene films from
        self._renderer = mujoco.Renderer(model, height=height, width=width)
        self._model, self._data = None, None

    def row_model(self) -> mujoco.MjModel:
        """The host model of the row: the backend's per-row model if it keeps one, else the nominal model."""
        models = getattr(self.env.physics, "_models", None)  # MujocoBackend: one (maybe private) model per row
        return models[self.row] if models is not None else self.env.physics.mj_model

    def host_data(self) -> mujoco.MjData:
        """The row's current state in a host ``MjData`` (``mj_forward`` already run)."""
        model = self.row_model()
        if model is not self._model:  # a row's model is replaced once, when it first gets its own parameters
            self._model, self._data = model, mujoco.MjData(model)
        state = self.env.physics.state()
        self._data.qpos[:] = state["qpos"][self.row].detach().cpu().double().numpy()  # [Q]
        self._data.qvel[:] = state["qvel"][self.row].detach().cpu().double().numpy()  # [V]
        mujoco.mj_forward(self._model, self._data)
        return self._data

    def render(self) -> np.ndarray:
        """The row's current frame, ``uint8 [H, W, 3]``."""
        self._renderer.update_scene(self.host_data(), camera=self.camera)
        targets = getattr(self.env.task, "render_targets", None)  # where the task wants bodies to go
        for body, pos, mat in targets(self.row) if callable(targets) else ():
            for marker in ghost_markers(self.render_model, self._data, body, pos, mat):
                self._draw(marker)
        return self._renderer.render()

    def _draw(self, marker: Marker) -> None:
        """Add one marker to the scene just filled (dropped when the scene's geom buffer is full)."""
        scene = self._renderer.scene
        if scene.ngeom >= scene.maxgeom:
            return
        mujoco.mjv_initGeom(
            scene.geoms[scene.ngeom],
            int(marker.type),
            np.asarray(marker.size, dtype=np.float64),
            np.asarray(marker.pos, dtype=np.float64),
            np.asarray(marker.mat, dtype=np.float64),
            np.asarray(marker.rgba, dtype=np.float32),
        )
        scene.ngeom += 1

    @property
    def scene_camera(self) -> mujoco.MjvGLCamera:
        """The OpenGL camera of the last rendered frame (position, forward/up axes, frustum)."""
        return self._renderer.scene.camera[0]

    def close(self) -> None:
        """Free the OpenGL context."""
        self._renderer.close()
