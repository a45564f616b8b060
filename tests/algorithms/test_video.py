"""Videos follow the robot: the tracking camera keeps HalfCheetah in frame where the old free camera loses it.

Each check projects the torso's world position into the image through the OpenGL camera MuJoCo used for the
frame (``scene.camera[0]``: position, forward/up axes, frustum) and, for native envs, counts robot pixels in a
segmentation render. A scripted sinusoidal action (no training) makes the cheetah travel more than 5 m.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import imageio
import mujoco
import numpy as np
import pytest
import torch

from robopt.config import ConfigError
from robopt.envs.registry import make_env
from robopt.envs.render import TASK_CAMERAS, CameraView, NativeRowRenderer, gymnasium_camera_kwargs
from robopt.evaluation import FrameProgress, record_video, video_config
from robopt.runner import train

sys.path.insert(0, str(Path(__file__).parent))
from test_runner import small_config  # noqa: E402

WIDTH, HEIGHT = 160, 128
STEPS, EVERY = 100, 10  # 100 steps of 0.05 s; one frame every 10 steps
# What Gymnasium's v5 HalfCheetah films from without a camera_name: a free camera fixed at the start
# (looking at the geoms' median position, distance 4, MuJoCo's default elevation and azimuth).
OLD_FREE_CAMERA = CameraView(lookat=(0.0, 0.0, 0.6), distance=4.0, elevation=-45.0, azimuth=90.0)


def scripted_action(t: int) -> np.ndarray:
    """An open-loop gait: joint j gets sin(1.6 t + j); it drives the cheetah ~10 m backwards in 100 steps."""
    return np.sin(1.6 * t + np.arange(6.0))  # [A]


def image_position(camera: mujoco.MjvGLCamera, point: np.ndarray, aspect: float) -> np.ndarray:
    """Normalized image coordinates of a world point (x right, y up; inside the image when both are in [-1, 1])."""
    offset = point - np.asarray(camera.pos)
    forward, up = np.asarray(camera.forward), np.asarray(camera.up)
    right = np.cross(forward, up)
    depth = offset @ forward
    near_x = camera.frustum_near * (offset @ right) / depth  # where the ray crosses the near plane
    near_y = camera.frustum_near * (offset @ up) / depth
    half_height = (camera.frustum_top - camera.frustum_bottom) / 2
    half_width = camera.frustum_width or half_height * aspect  # 0: from the viewport's aspect ratio
    center_y = (camera.frustum_top + camera.frustum_bottom) / 2
    return np.array([(near_x - camera.frustum_center) / half_width, (near_y - center_y) / half_height])


def test_image_position_hand_worked():
    # camera at the origin looking along +y with z up, near plane 0.1 at half-height 0.05 (fovy 53.13 deg),
    # aspect 2 -> half-width 0.1. The point (1, 4, 1): depth 4, near-plane x = 0.1 * 1 / 4 = 0.025 -> 0.25;
    # near-plane y = 0.025 -> 0.025 / 0.05 = 0.5.
    camera = mujoco.MjvGLCamera()
    camera.pos, camera.forward, camera.up = [0, 0, 0], [0, 1, 0], [0, 0, 1]
    camera.frustum_near, camera.frustum_bottom, camera.frustum_top = 0.1, -0.05, 0.05
    np.testing.assert_allclose(image_position(camera, np.array([1.0, 4.0, 1.0]), aspect=2.0), [0.25, 0.5])


def _native_episode(view: CameraView | None) -> tuple[list[np.ndarray], list[int], float]:
    """Torso image positions and robot pixels near the image centre, frame by frame; the torso's travel (m)."""
    env = make_env("mujoco/HalfCheetah", 1, backend="mujoco")
    renderer = NativeRowRenderer(env, row=0, width=WIDTH, height=HEIGHT, view=view)
    segmenter = mujoco.Renderer(env.physics.mj_model, height=HEIGHT, width=WIDTH)
    segmenter.enable_segmentation_rendering()
    robot_geoms = np.flatnonzero(env.physics.mj_model.geom_bodyid > 0)  # every geom but the floor
    positions, centre_pixels = [], []
    env.reset(seed=0)
    start = env.physics.state()["qpos"][0, 0].item()
    for t in range(STEPS + 1):
        if t % EVERY == 0:
            frame = renderer.render()
            assert frame.shape == (HEIGHT, WIDTH, 3) and frame.dtype == np.uint8
            torso = renderer.host_data().xpos[1]
            positions.append(image_position(renderer.scene_camera, torso, WIDTH / HEIGHT))
            segmenter.update_scene(renderer.host_data(), camera=renderer.camera)
            ids = segmenter.render()  # [H, W, 2]: object id, object type
            is_robot = (ids[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & np.isin(ids[..., 0], robot_geoms)
            centre = is_robot[HEIGHT // 4 : 3 * HEIGHT // 4, WIDTH // 4 : 3 * WIDTH // 4]
            centre_pixels.append(int(centre.sum()))
        env.step(torch.as_tensor(scripted_action(t), dtype=torch.float32)[None])
    travel = abs(env.physics.state()["qpos"][0, 0].item() - start)
    renderer.close(), segmenter.close(), env.close()
    return positions, centre_pixels, travel


def test_native_halfcheetah_video_follows_the_robot():
    positions, centre_pixels, travel = _native_episode(view=None)
    assert travel > 5.0
    assert np.abs(np.stack(positions)).max() < 0.5  # the torso stays in the middle half of the image
    assert min(centre_pixels) > 50  # and the robot is drawn there, every frame


def test_native_old_free_camera_loses_the_robot():
    positions, centre_pixels, travel = _native_episode(view=OLD_FREE_CAMERA)
    assert travel > 5.0
    assert np.abs(np.stack(positions)).max() > 1.0  # the torso leaves the image
    assert min(centre_pixels) == 0


def _gymnasium_positions(camera_kwargs: dict) -> tuple[list[np.ndarray], float]:
    env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=WIDTH, height=HEIGHT, **camera_kwargs)
    env.reset(seed=0)
    data = env.unwrapped.data
    start, positions = float(data.qpos[0]), []
    for t in range(STEPS + 1):
        if t % EVERY == 0:
            assert env.render().shape == (HEIGHT, WIDTH, 3)
            camera = env.unwrapped.mujoco_renderer.viewer.scn.camera[0]
            positions.append(image_position(camera, data.xpos[1].copy(), WIDTH / HEIGHT))
        env.step(scripted_action(t))
    travel = abs(float(data.qpos[0]) - start)
    env.close()
    return positions, travel


def test_gymnasium_halfcheetah_video_follows_the_robot_and_default_does_not():
    kwargs = gymnasium_camera_kwargs("HalfCheetah-v5", {})
    assert kwargs == {"camera_name": "track"}
    positions, travel = _gymnasium_positions(kwargs)
    assert travel > 5.0
    assert np.abs(np.stack(positions)).max() < 0.5
    positions, travel = _gymnasium_positions({})  # Gymnasium's default: the old behaviour
    assert travel > 5.0
    assert np.abs(np.stack(positions)).max() > 1.0


def test_gymnasium_camera_kwargs_only_for_mujoco_v5_ids_without_a_chosen_camera():
    assert gymnasium_camera_kwargs("Hopper-v5", {"ctrl_cost_weight": 0.1}) == {"camera_name": "track"}
    reacher = gymnasium_camera_kwargs("Reacher-v5", {})["default_camera_config"]
    assert reacher["elevation"] == -90.0  # fixed base: a free camera over the arena
    assert gymnasium_camera_kwargs("Pendulum-v1", {}) == {}  # not a MuJoCo env
    assert gymnasium_camera_kwargs("HalfCheetah-v4", {}) == {}  # no default_camera_config before v5
    assert gymnasium_camera_kwargs("HalfCheetah-v5", {"camera_id": 0}) == {}  # the run chose its own


def test_video_config_resolves_the_backend_the_run_trained_on(tmp_path):
    warp = small_config(tmp_path, env_id="mujoco/Ant", env={"backend": "mujoco_warp", "kwargs": {"nconmax": 64}})
    config = video_config(warp)  # device cpu: filmed on the CPU backend, Warp-only options dropped
    assert (config.env.backend, config.env.kwargs, config.device) == ("mujoco", {}, "cpu")
    on_gpu = video_config(replace(warp, device="cuda"))
    expected = ("mujoco_warp", "cuda") if torch.cuda.is_available() else ("mujoco", "cpu")
    assert (on_gpu.env.backend, on_gpu.device) == expected
    few = small_config(tmp_path, env_id="mujoco/Hopper", env={"backend": "auto"})  # 2 envs, no options
    assert video_config(few).env.backend == "gymnasium"  # what 'auto' trained it on
    randomized = small_config(tmp_path, env_id="mujoco/Hopper", env={"kwargs": {"randomization": {}}})
    assert video_config(randomized).env.backend == "mujoco"
    assert video_config(small_config(tmp_path, env_id="HalfCheetah-v5")).env.backend == "gymnasium"


def test_native_row_renderer_uses_the_rows_randomized_model():
    env = make_env("mujoco/HalfCheetah", 2, backend="mujoco", randomization={"body_mass": [0.5, 2.0]}, seed=1)
    renderer = NativeRowRenderer(env, row=1, width=WIDTH, height=HEIGHT)
    data = renderer.host_data()
    assert renderer.row_model() is not env.physics.mj_model  # the row's private, randomized copy
    np.testing.assert_allclose(renderer.row_model().body_mass, env.physics.state()["body_mass"][1].numpy())
    np.testing.assert_allclose(data.qpos, env.physics.state()["qpos"][1].numpy())
    renderer.close(), env.close()
    with pytest.raises(ValueError, match="row must be in"):
        NativeRowRenderer(env, row=2)


def test_record_video_of_a_randomized_native_run(tmp_path):
    config = small_config(
        tmp_path,
        env_id="mujoco/HalfCheetah",
        total_steps=2 * 64,  # one iteration
        env={"backend": "mujoco", "num_envs": 2, "kwargs": {"randomization": {"body_mass": [0.9, 1.1]}}},
    )
    run_dir = train(config).run_dir
    path = tmp_path / "video" / "cheetah.mp4"
    frames = record_video(run_dir, path, max_steps=12, width=WIDTH, height=HEIGHT, progress=False)
    assert frames == 13  # HalfCheetah's 20 Hz is under the default 30 fps: the reset state and one frame per step
    video = imageio.mimread(str(path))
    assert len(video) == 13 and video[0].shape == (HEIGHT, WIDTH, 3)
    # at 10 frames per second of the episode: every 2nd step drawn (reset, steps 2, 4, .. 12), played at 10 fps
    sparse = tmp_path / "video" / "sparse.mp4"
    assert record_video(run_dir, sparse, max_steps=12, fps=10, width=WIDTH, height=HEIGHT, progress=False) == 7
    with imageio.get_reader(str(sparse)) as reader:
        assert reader.get_meta_data()["fps"] == pytest.approx(10.0)
    with pytest.raises(ConfigError, match="video fps must be > 0"):
        record_video(run_dir, sparse, fps=0, progress=False)


@pytest.mark.parametrize("task_name", sorted(TASK_CAMERAS))
def test_every_task_camera_frames_every_body_at_reset(task_name):
    env_id = f"{task_name}-v5"
    env = gym.make(env_id, render_mode="rgb_array", width=48, height=32, **gymnasium_camera_kwargs(env_id, {}))
    env.reset(seed=0)
    frame = env.render()
    camera = env.unwrapped.mujoco_renderer.viewer.scn.camera[0]
    bodies = env.unwrapped.data.xpos[1:]  # [Bd - 1, 3], the world body left out
    positions = np.stack([image_position(camera, body, 48 / 32) for body in bodies])
    env.close()
    assert frame.shape == (32, 48, 3)
    assert np.abs(positions).max() < 0.9, positions


def test_frame_progress_prints_a_line_per_tenth_off_a_terminal_and_nothing_when_disabled(capsys):
    with FrameProgress(20) as progress:  # pytest's captured stderr is not a terminal
        for frames in range(1, 21):
            progress.update(frames)
    lines = capsys.readouterr().err.splitlines()
    # a line at frame 1, then every 20 // 10 = 2 frames: 1, 3, ..., 19 -> 10 lines
    assert [line.split()[1] for line in lines] == [f"{n}/20" for n in range(1, 20, 2)]
    with FrameProgress(20, enabled=False) as progress:
        progress.update(5)
    assert capsys.readouterr().err == ""


def _ground_pixels(env, renderer: NativeRowRenderer) -> int:
    """Pixels of the world's ground plane in the lower half of the row's frame (a segmentation render)."""
    segmenter = mujoco.Renderer(renderer.render_model, height=HEIGHT, width=WIDTH)
    segmenter.enable_segmentation_rendering()
    segmenter.update_scene(renderer.host_data(), camera=renderer.camera)
    ids = segmenter.render()
    segmenter.close()
    model = env.physics.mj_model
    planes = np.flatnonzero((model.geom_bodyid == 0) & (model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE))
    is_ground = (ids[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & np.isin(ids[..., 0], planes)
    return int(is_ground[HEIGHT // 2 :].sum())


def test_the_ground_is_drawn_however_far_the_robot_runs():
    # Gymnasium's HalfCheetah floor is a 40 m plane: 100 m out, the drawn model had no floor left under the robot
    env = make_env("mujoco/HalfCheetah", 1, backend="mujoco")
    renderer = NativeRowRenderer(env, row=0, width=WIDTH, height=HEIGHT)
    env.reset(seed=0)
    qpos = env.physics.state()["qpos"].clone()
    qpos[0, 0] = 100.0
    env.physics.set_state(torch.tensor([0]), qpos, torch.zeros_like(env.physics.state()["qvel"]))
    assert _ground_pixels(env, renderer) > 0.5 * (HEIGHT // 2) * WIDTH  # most of the lower half is floor
    assert env.physics.mj_model.geom_size[0, 0] == 40.0  # the simulated model is untouched
    renderer.close(), env.close()


def test_a_robot_from_its_description_is_filmed_from_its_track_camera():
    from tests.robots.conftest import quadruped_sections

    robot, task = quadruped_sections()
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=0)
    renderer = NativeRowRenderer(env, row=0, width=WIDTH, height=HEIGHT)
    assert renderer.view.camera_name == "track"
    env.reset(seed=0)
    qpos = env.physics.state()["qpos"].clone()
    qpos[0, :2] = torch.tensor([25.0, -10.0])  # far from where it started: the camera follows its centre of mass
    env.physics.set_state(torch.tensor([0]), qpos, torch.zeros_like(env.physics.state()["qvel"]))
    frame = renderer.render()
    trunk = renderer.host_data().xpos[env.task.robot.base_body]
    assert np.abs(image_position(renderer.scene_camera, trunk, WIDTH / HEIGHT)).max() < 0.5
    assert frame.std() > 10 and _ground_pixels(env, renderer) > 0.3 * (HEIGHT // 2) * WIDTH
    renderer.close(), env.close()
