"""Generated terrain (``task.terrain``): its heights against MuJoCo's own ray casts, the stairs' exact geometry, rows
on their tiles, the height scan, the curriculum's rule and its exact resume, and one-line refusals of bad input."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from robopt.config import build_dataclass
from robopt.envs import make_env
from robopt.envs.robot.signals import Signals
from robopt.envs.robot.terrain import TERRAIN_TYPES, TerrainConfig, add_terrain, build_terrain, column_types
from robopt.options import ConfigError
from tests.robots.conftest import quadruped_sections

EVERY_TYPE = {name: 1.0 / len(TERRAIN_TYPES) for name in TERRAIN_TYPES}
SMALL = {"types": EVERY_TYPE, "levels": 3, "columns": 7, "tile": 4.0, "border": 1.0, "platform": 1.0}


def terrain_config(**changes) -> TerrainConfig:
    return build_dataclass(TerrainConfig, {**SMALL, **changes}, "task.terrain.")


def quadruped_on_terrain(num_envs: int = 14, terrain: dict | None = None, **task_changes):
    robot, task = quadruped_sections()
    for entry in task["observations"].values():
        entry.pop("noise", None)
    task["terrain"] = {**SMALL, **(terrain or {})}
    task.update(task_changes)
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1)


def test_heights_are_what_mujoco_collides_with() -> None:
    # rays cast straight down at every kind of tile, against the compiled terrain: the lookup's heights agree to
    # float32 rounding of the heightfield's data (MuJoCo stores it as float32)
    spec = mujoco.MjSpec()
    tables = add_terrain(spec, terrain_config())
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    generator = np.random.default_rng(0)
    width, depth = tables.extent
    points = np.stack(
        [
            generator.uniform(tables.origin[0], tables.origin[0] + width, 3000),
            generator.uniform(tables.origin[1], tables.origin[1] + depth, 3000),
        ],
        axis=1,
    )
    geom = np.zeros(1, np.int32)
    cast = np.array(
        [10.0 - mujoco.mj_ray(model, data, np.array([x, y, 10.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
         for x, y in points]
    )  # fmt: skip
    looked_up = tables.height(torch.tensor(points)).numpy()
    np.testing.assert_allclose(looked_up, cast, rtol=0, atol=1e-5)
    assert cast.std() > 0.1  # the points met slopes, stairs, pits and boxes, not only flat ground


def test_stairs_reach_legged_gyms_heights() -> None:
    config = terrain_config(types={"stairs_up": 0.5, "stairs_down": 0.5}, columns=2, tile=8.0, platform=2.0)
    _, tables = build_terrain(config)
    assert column_types(config) == ["stairs_up", "stairs_down"]
    # the top level's risers are 0.23 m (legged_gym's hardest), 10 treads of 0.3 m up to the 2 m platform
    steps = math.floor((4.0 - 1.0) / 0.3)
    top = tables.centres[2]  # [C, 2]
    for column, sign in ((0, 1.0), (1, -1.0)):
        centre = top[column]
        for k in range(steps + 1):  # the middle of tread k from the tile's edge
            distance = 4.0 - (k + 0.5) * 0.3 if k < steps else 0.0
            point = centre + torch.tensor([distance, 0.0], dtype=torch.float64)
            expected = sign * 0.23 * k
            assert float(tables.height(point)) == pytest.approx(expected, abs=1e-9)
        # a riser is a ramp one sample (0.1 m) wide at its foot: outward of the first tread's edge going up,
        # inward of it going down; the edge itself is at the higher tread's height
        edge = centre + torch.tensor([4.0 - 0.3, 0.0], dtype=torch.float64)
        foot = 0.1 if sign > 0 else -0.1
        high, low, middle = (
            float(tables.height(edge + torch.tensor([d, 0.0], dtype=torch.float64))) for d in (0.0, foot, foot / 2)
        )
        assert high - low == pytest.approx(0.23, abs=1e-9) and middle == pytest.approx((high + low) / 2, abs=1e-9)
    assert float(tables.start_height[2, 0]) == pytest.approx(0.23 * steps)
    assert float(tables.start_height[0, 0]) == pytest.approx(0.05 * steps)  # the easiest level: 0.05 m risers


def test_rows_start_on_their_tiles_and_stand() -> None:
    env = quadruped_on_terrain(14, reset={})
    env.reset(seed=0)
    task = env.task
    rows = task.terrain
    assert rows.column.tolist() == [n * 7 // 14 for n in range(14)]  # two rows per column, so per type
    base = env.physics.state()["qpos"][:, :3]
    centres = task.robot.terrain.centres[rows.level, rows.column]
    torch.testing.assert_close(base[:, :2], centres, rtol=0, atol=1e-9)
    for _ in range(50):
        env.step(torch.zeros(14, 12))
    signals = Signals(env.physics.state(), task.robot, task.context)
    # the feet stand on the terrain (its contact sensors read the terrain body) and the base stands above it
    assert signals.feet_contact.all()
    assert (signals.base_height > 0.2).all() and (signals.base_height < 0.4).all()
    assert (signals.feet_height.abs() < 0.02).all()


def test_height_scan_reads_the_ground_around_the_base() -> None:
    scan = {"points": [5, 3], "spacing": 0.2, "offset": 0.1}
    env = quadruped_on_terrain(14, observations={"height_scan": scan}, reset={"base_yaw": 3.14159})
    env.reset(seed=0)
    state, task = env.physics.state(), env.task
    signals = Signals(state, task.robot, task.context)
    value = task.robot.terrain  # the heights under the grid, turned by each base's yaw, by hand
    quat = state["qpos"][:, 3:7]
    yaw = torch.atan2(
        2 * (quat[:, 0] * quat[:, 3] + quat[:, 1] * quat[:, 2]), 1 - 2 * (quat[:, 2] ** 2 + quat[:, 3] ** 2)
    )
    xs = torch.tensor([-0.4, -0.2, 0.0, 0.2, 0.4], dtype=torch.float64)
    ys = torch.tensor([-0.2, 0.0, 0.2], dtype=torch.float64)
    local = torch.stack(torch.meshgrid(xs, ys, indexing="ij"), dim=-1).reshape(-1, 2)  # x-major
    cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
    world = torch.stack(
        [state["qpos"][:, None, 0] + cos * local[:, 0] - sin * local[:, 1],
         state["qpos"][:, None, 1] + sin * local[:, 0] + cos * local[:, 1]],
        dim=-1,
    )  # fmt: skip
    expected = state["qpos"][:, None, 2] - value.height(world) - 0.1
    observed = env.task.frame[:, -15:]
    torch.testing.assert_close(observed, expected, rtol=0, atol=1e-9)
    assert signals.base_pos.shape == (14, 3)
    # on the flat floor the scan is the base's height (minus the offset) everywhere
    robot, flat_task = quadruped_sections()
    flat_task["observations"] = {"height_scan": scan}
    flat = make_env("robot", 2, backend="mujoco", robot=robot, task=flat_task, seed=0, num_threads=1)
    z = flat.physics.state()["qpos"][:, 2:3]
    torch.testing.assert_close(flat.task.frame, (z - 0.1).expand(-1, 15), rtol=0, atol=1e-12)


def test_the_curriculum_moves_levels_by_distance_walked() -> None:
    env = quadruped_on_terrain(14, terrain={"initial_level": 1}, reset={})
    env.reset(seed=0)
    rows = env.task.terrain
    assert int(rows.level.max()) <= 1
    generator = torch.Generator().manual_seed(0)
    everyone = torch.arange(14)
    rows.level[:] = torch.tensor([0, 1, 2] * 4 + [2, 2])
    start = rows.start.clone()
    # walked 3 m (over half a 4 m tile): up; 0.1 m with a 1 m/s command over 20 s (under 10 m): down; 5 m with a
    # 1 m/s command: neither. A row past the top level (2) goes to a random level.
    walked = torch.zeros(14, 2, dtype=torch.float64)
    walked[:6, 0] = 3.0
    walked[6:10, 0] = 0.1
    walked[10:, 0] = 1.9
    speed = torch.tensor([0.0] * 6 + [1.0] * 4 + [0.05] * 4, dtype=torch.float64)
    before = rows.level.clone()
    rows.place(everyone, start + walked, speed, True, generator)
    assert rows.level[:6].tolist()[:2] == [1, 2] and rows.level[3:5].tolist() == [1, 2]
    assert rows.level[6:10].tolist() == [max(0, int(b) - 1) for b in before[6:10]]
    assert rows.level[10:].tolist() == before[10:].tolist()
    assert all(0 <= int(level) <= 2 for level in rows.level[[2, 5]])
    # a reset that does not end an episode keeps the levels
    kept = rows.level.clone()
    rows.place(everyone, start, torch.zeros(14, dtype=torch.float64), False, generator)
    assert torch.equal(rows.level, kept)
    log = env.task.terrain.log()
    assert set(log) == {"terrain_level"} | {f"terrain_level/{name}" for name in TERRAIN_TYPES}


def test_terrain_levels_resume_exactly() -> None:
    first, second = quadruped_on_terrain(14, episode_s=0.2), quadruped_on_terrain(14, episode_s=0.2)
    generator = torch.Generator().manual_seed(0)
    actions = [0.3 * torch.randn(14, 12, generator=generator) for _ in range(40)]
    first.reset(seed=3)
    for action in actions[:15]:
        first.step(action)
    second.load_state_dict(first.state_dict())
    for action in actions[15:]:
        out_first, out_second = first.step(action), second.step(action)
        for a, b in zip(out_first[:4], out_second[:4], strict=True):  # same kernels and shapes: bit equality
            assert torch.equal(a, b)
    assert torch.equal(first.task.terrain.level, second.task.terrain.level)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"types": {"lava": 1.0}}, "'lava' is not a terrain type; allowed: flat, rough, slope_up"),
        ({"types": {"flat": 0.5, "rough": 0.4}}, "the shares sum to 0.9; they must sum to 1"),
        ({"types": {"flat": 1.5, "rough": -0.5}}, "types.flat: expected a share in [0, 1]"),
        ({"difficulty": [0.2, 1.5]}, "difficulty: expected [low, high] within [0, 1]"),
        ({"difficulty": [0.8, 0.2]}, "difficulty: expected [low, high] with finite low <= high"),
        ({"slope": [-0.1, 0.4]}, "slope: expected numbers >= 0"),
        ({"tile": 4.05}, "tile=4.05: expected an even multiple (at least 4) of resolution=0.1"),
        ({"stair_width": 0.25}, "stair_width=0.25: expected a multiple of resolution=0.1"),
        ({"platform": 5.0}, "platform=5.0: expected less than the tile's side (4.0 m)"),
        ({"columns": 3}, "gets no column of 3; raise columns or its share"),
    ],
)
def test_bad_terrain_is_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        terrain_config(**changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("scan", "message"),
    [
        ({"points": [0, 11]}, "points: expected two integers >= 1"),
        ({"points": [17]}, "points: expected two integers >= 1"),
        ({"points": [17, 11], "spacing": 0.5}, "the grid (8 x 5 m) is wider than a terrain tile (4 m)"),
    ],
)
def test_bad_height_scan_is_one_line(scan: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        quadruped_on_terrain(2, observations={"height_scan": scan})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_terrain_needs_a_floating_base(arm_file) -> None:
    task = {"observations": {"joint_pos": {}}, "rewards": {"alive": {"weight": 1.0}}, "terrain": SMALL}
    robot = {"mjcf": str(arm_file), "joints": {"shoulder": {"kp": 5.0}}}
    with pytest.raises(ValueError, match=r"^task.terrain needs a robot with a floating base"):
        make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=0)
