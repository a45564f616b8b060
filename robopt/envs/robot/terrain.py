"""Generated terrain for legged tasks (``task.terrain``): a grid of tiles built into the model with ``mujoco.MjSpec``.

Shapes: L levels (grid rows along x), C columns (along y), X x Y heightfield samples, N envs, P query points.

The grid has ``levels`` rows of difficulty (row l has difficulty ``low + (high - low) * l / (levels - 1)`` of
``difficulty: [low, high]``) and ``columns`` columns, each of one sub-terrain type; the types share the columns by
``types`` (type -> share; the shares sum to 1), in the order of ``TERRAIN_TYPES``, as legged_gym (Rudin et al. 2022)
and Isaac Lab lay out their rough-terrain mixes. Each tile is a ``tile`` x ``tile`` m square; a flat ``border`` runs
around the grid. The grid is centred on the world's origin.

Types, with d the tile's difficulty and each range ``[at d = 0, at d = 1]`` a config option:

- ``flat``: z = 0.
- ``rough``: uniform height noise in +-``rough_height`` (m) at every heightfield sample.
- ``slope_up`` / ``slope_down``: a pyramid rising (falling) toward the tile's centre at ``slope`` (rise over run),
  with a flat ``platform`` (m square) on top (at the bottom).
- ``stairs_up`` / ``stairs_down``: pyramid stairs of ``stair_width`` (m) treads and ``stair_height`` (m) risers rising
  (falling) toward a central platform.
- ``boxes``: ``box_count`` random boxes of ``box_size`` (m, side) and ``box_height`` (m, in [h/2, h]) on flat ground,
  the central platform kept clear.

The whole grid is one ``hfield`` geom at ``resolution`` (m between samples) in one static body, ``robopt_terrain``,
which the feet's contact sensors read. Stairs and boxes are laid out as boxes with their edges on sample lines and
written into the heightfield: a sample on or inside a box's edge takes its top, so each riser is a ramp one sample
wide at its foot (0.1 m for a 0.23 m riser at the default resolution; halve the resolution to halve it). Box geoms
would make risers vertical, but MuJoCo poses and bounds every geom at every step: the default grid's 3300 boxes made
the quadruped's physics step 7 times as long as on the flat floor (benchmarks/terrain_cost.py); the heightfield
costs 1.5 times the floor's.

``TerrainTables.height(xy)`` is the terrain's height under world points, from the same samples the model holds: the
heightfield's triangles as MuJoCo collides with them (each cell split along the diagonal from its (x0, y0) corner to
its (x1, y1) corner). ``tests/robots/test_terrain.py`` checks it against ``mujoco.mj_ray`` cast at the terrain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from robopt.options import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, ConfigError, low_high, option

TERRAIN_TYPES = ("flat", "rough", "slope_up", "slope_down", "stairs_up", "stairs_down", "boxes")
BODY = "robopt_terrain"
_BASE = 1.0  # depth of the heightfield's solid base below its lowest sample (m)


@dataclass(frozen=True)
class TerrainConfig:
    types: dict = option(
        {},
        f"sub-terrain type -> share of the grid's columns (shares sum to 1): {', '.join(TERRAIN_TYPES)}; "
        "{} = no terrain (the flat floor)",
    )
    levels: int = option(10, "rows of the grid: difficulty levels, easiest first", check=AT_LEAST_ONE)
    columns: int = option(20, "columns of the grid, shared among the types", check=AT_LEAST_ONE)
    tile: float = option(8.0, "side of a tile (m)", check=POSITIVE)
    border: float = option(8.0, "width of the flat border around the grid (m)", check=NON_NEGATIVE)
    resolution: float = option(0.1, "heightfield sample spacing (m); box edges snap to it", check=POSITIVE)
    difficulty: tuple[float, ...] = option((0.0, 1.0), "difficulty of the first and the last level, in [0, 1]")
    rough_height: tuple[float, ...] = option((0.02, 0.10), "rough: noise amplitude (m) at difficulty 0 and 1")
    slope: tuple[float, ...] = option((0.0, 0.4), "slopes: rise over run at difficulty 0 and 1")
    stair_height: tuple[float, ...] = option((0.05, 0.23), "stairs: riser height (m) at difficulty 0 and 1")
    stair_width: float = option(0.3, "stairs: tread depth (m), a multiple of the resolution", check=POSITIVE)
    box_height: tuple[float, ...] = option((0.05, 0.20), "boxes: the largest box height (m) at difficulty 0 and 1")
    box_size: tuple[float, ...] = option((1.0, 2.0), "boxes: side range [low, high] (m)")
    box_count: int = option(20, "boxes: boxes per tile", check=NON_NEGATIVE)
    platform: float = option(2.0, "side of the flat square at a tile's centre where rows start (m)", check=POSITIVE)
    friction: float = option(1.0, "the terrain's sliding friction", check=NON_NEGATIVE)
    seed: int = option(0, "seed of the terrain's own random draws (rough noise, boxes): a config is one terrain")
    curriculum: bool = option(
        True,
        "terrain curriculum: at a reset a row that walked over half a tile moves a level up, one that walked under "
        "half its commanded distance a level down; rows past the top go to random levels",
    )
    initial_level: int = option(
        4,
        "with the curriculum, rows start on levels 0..initial_level (at most the top; without it, on every level)",
        check=NON_NEGATIVE,
    )

    def __post_init__(self) -> None:
        parse_shares(self.types)
        if not self.types:
            return
        for key in ("difficulty", "rough_height", "slope", "stair_height", "box_height", "box_size"):
            low, high = low_high(key, list(getattr(self, key)))
            if low < 0:
                raise ConfigError(f"{key}: expected numbers >= 0, got {list(getattr(self, key))}")
        low, high = self.difficulty
        if high > 1.0:
            raise ConfigError(f"difficulty: expected [low, high] within [0, 1], got {list(self.difficulty)}")
        if self.box_size[0] <= 0:
            raise ConfigError(f"box_size: expected sides > 0 (m), got {list(self.box_size)}")
        cells = self.tile / self.resolution
        if abs(cells - round(cells)) > 1e-6 or round(cells) < 4 or round(cells) % 2:
            raise ConfigError(
                f"tile={self.tile}: expected an even multiple (at least 4) of resolution={self.resolution}"
            )
        steps = self.stair_width / self.resolution
        if abs(steps - round(steps)) > 1e-6:
            raise ConfigError(f"stair_width={self.stair_width}: expected a multiple of resolution={self.resolution}")
        if self.platform >= self.tile:
            raise ConfigError(f"platform={self.platform}: expected less than the tile's side ({self.tile} m)")
        columns = column_types(self)
        missing = [name for name in self.types if self.types[name] > 0 and name not in columns]
        if missing:
            raise ConfigError(f"types: {missing[0]!r} gets no column of {self.columns}; raise columns or its share")


def parse_shares(types) -> dict[str, float]:
    """``types`` checked: known names, shares in [0, 1] summing to 1 (ConfigError naming the problem)."""
    if not isinstance(types, dict):
        raise ConfigError(f"types: expected a mapping of terrain type -> share, got {types!r}")
    for name, share in types.items():
        if name not in TERRAIN_TYPES:
            raise ConfigError(f"types: {name!r} is not a terrain type; allowed: {', '.join(TERRAIN_TYPES)}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            raise ConfigError(f"types.{name}: expected a share in [0, 1], got {share!r}")
    total = sum(float(share) for share in types.values())
    if types and abs(total - 1.0) > 1e-6:
        raise ConfigError(f"types: the shares sum to {total:.6g}; they must sum to 1")
    return {name: float(share) for name, share in types.items()}


def column_types(config: TerrainConfig) -> list[str]:
    """The type of each column: column c takes the type whose cumulative share first exceeds (c + 0.5) / columns."""
    shares = parse_shares(config.types)
    ordered = [(name, shares[name]) for name in TERRAIN_TYPES if shares.get(name, 0.0) > 0]
    out = []
    for column in range(config.columns):
        place, total = (column + 0.5) / config.columns, 0.0
        for name, share in ordered:
            total += share
            if place < total or name == ordered[-1][0]:
                out.append(name)
                break
    return out


def level_difficulty(config: TerrainConfig, level: int) -> float:
    low, high = config.difficulty
    return high if config.levels == 1 else low + (high - low) * level / (config.levels - 1)


def _at(value_range: tuple[float, ...], difficulty: float) -> float:
    return value_range[0] + (value_range[1] - value_range[0]) * difficulty


@dataclass(frozen=True)
class Box:
    """A box of the terrain: centre x, y and half sides (m, world), bottom and top (m)."""

    x: float
    y: float
    hx: float
    hy: float
    bottom: float
    top: float


class _Builder:
    """The terrain's heights and the boxes that stairs and obstacles are laid out as (numpy, float64); ``build_terrain``
    writes the boxes into the heights."""

    def __init__(self, config: TerrainConfig) -> None:
        self.config = config
        res = config.resolution
        self.cells = round(config.tile / res)  # cells per tile side
        self.border = math.ceil(config.border / res - 1e-9)  # cells of border
        nx = config.levels * self.cells + 2 * self.border + 1
        ny = config.columns * self.cells + 2 * self.border + 1
        self.heights = np.zeros((nx, ny))  # [X, Y] samples, x index first
        self.x0 = -config.levels * config.tile / 2 - self.border * res  # world x of sample 0
        self.y0 = -config.columns * config.tile / 2 - self.border * res
        self.boxes: list[Box] = []
        self.rng = np.random.default_rng(config.seed)
        self.types = column_types(config)

    def tile_origin(self, level: int, column: int) -> tuple[int, int]:
        """Sample index of a tile's (low x, low y) corner."""
        return self.border + level * self.cells, self.border + column * self.cells

    def build(self) -> None:
        for level in range(self.config.levels):
            difficulty = level_difficulty(self.config, level)
            for column, kind in enumerate(self.types):
                getattr(self, f"_{kind}")(level, column, difficulty)

    # -- tiles -----------------------------------------------------------------------------------------------------
    def _local(self, level: int, column: int) -> tuple[slice, slice, np.ndarray, np.ndarray]:
        """The tile's samples (inner, the shared edge samples left to the neighbours) and their offsets from the
        tile's centre [n, n] (m)."""
        i0, j0 = self.tile_origin(level, column)
        n, res = self.cells, self.config.resolution
        offsets = (np.arange(1, n) - n / 2) * res
        return slice(i0 + 1, i0 + n), slice(j0 + 1, j0 + n), offsets[:, None], offsets[None, :]

    def _flat(self, level, column, difficulty) -> None:
        pass

    def _rough(self, level, column, difficulty) -> None:
        rows, cols, u, v = self._local(level, column)
        amplitude = _at(self.config.rough_height, difficulty)
        self.heights[rows, cols] = self.rng.uniform(-amplitude, amplitude, size=(u.size, v.size))

    def _pyramid(self, level, column, rise: float) -> None:
        rows, cols, u, v = self._local(level, column)
        half, flat = self.config.tile / 2, self.config.platform / 2
        distance = np.maximum(np.abs(u), np.abs(v))  # Chebyshev distance from the centre
        self.heights[rows, cols] = rise * (half - np.maximum(distance, flat))

    def _slope_up(self, level, column, difficulty) -> None:
        self._pyramid(level, column, _at(self.config.slope, difficulty))

    def _slope_down(self, level, column, difficulty) -> None:
        self._pyramid(level, column, -_at(self.config.slope, difficulty))

    def _centre(self, level: int, column: int) -> tuple[float, float]:
        return (
            -self.config.levels * self.config.tile / 2 + (level + 0.5) * self.config.tile,
            -self.config.columns * self.config.tile / 2 + (column + 0.5) * self.config.tile,
        )

    def _steps(self) -> int:
        return max(0, math.floor((self.config.tile / 2 - self.config.platform / 2) / self.config.stair_width + 1e-9))

    def _stairs_up(self, level, column, difficulty) -> None:
        """Slabs stacked toward the centre: slab k (1..K) covers the square of half side tile/2 - k w, from
        (k - 1) h to k h."""
        x, y = self._centre(level, column)
        rise, width, half = _at(self.config.stair_height, difficulty), self.config.stair_width, self.config.tile / 2
        if rise <= 0:
            return
        for k in range(1, self._steps() + 1):
            side = half - k * width
            self.boxes.append(Box(x, y, side, side, (k - 1) * rise, k * rise))

    def _stairs_down(self, level, column, difficulty) -> None:
        """A pit: its floor (the heightfield) K h down; frame k (0..K-1), four boxes between the half sides
        tile/2 - (k + 1) w and tile/2, from -(k + 1) h to -k h."""
        x, y = self._centre(level, column)
        rise, width, half = _at(self.config.stair_height, difficulty), self.config.stair_width, self.config.tile / 2
        steps = self._steps()
        if rise <= 0 or steps == 0:
            return
        rows, cols, u, v = self._local(level, column)
        inside = np.maximum(np.abs(u), np.abs(v)) < half - width / 2  # the outer strip keeps the neighbours' edge
        self.heights[rows, cols] = np.where(inside, -steps * rise, self.heights[rows, cols])
        for k in range(steps):
            inner = half - (k + 1) * width
            bottom, top = -(k + 1) * rise, -k * rise
            thick = (half - inner) / 2
            middle = (half + inner) / 2
            self.boxes.append(Box(x + middle, y, thick, half, bottom, top))  # +x and -x sides, full length
            self.boxes.append(Box(x - middle, y, thick, half, bottom, top))
            self.boxes.append(Box(x, y + middle, inner, thick, bottom, top))  # +y and -y, between them
            self.boxes.append(Box(x, y - middle, inner, thick, bottom, top))

    def _boxes(self, level, column, difficulty) -> None:
        x, y = self._centre(level, column)
        config, res = self.config, self.config.resolution
        tallest = _at(config.box_height, difficulty)
        if tallest <= 0:
            return
        half, flat = config.tile / 2, config.platform / 2
        for _ in range(config.box_count):
            for _attempt in range(20):  # a box over the platform is drawn again
                sx, sy = (max(res, round(self.rng.uniform(*config.box_size) / res) * res) for _ in range(2))
                sx, sy = min(sx, config.tile), min(sy, config.tile)
                cx = round(self.rng.uniform(-half + sx / 2, half - sx / 2) / res - sx / res / 2) * res + sx / 2
                cy = round(self.rng.uniform(-half + sy / 2, half - sy / 2) / res - sy / res / 2) * res + sy / 2
                if abs(cx) - sx / 2 < flat and abs(cy) - sy / 2 < flat:
                    continue
                top = self.rng.uniform(tallest / 2, tallest)
                self.boxes.append(Box(x + cx, y + cy, sx / 2, sy / 2, 0.0, top))
                break


@dataclass(frozen=True)
class TerrainTables:
    """The built terrain (tensors on CPU until ``to``): heights for lookups, and each tile's type and start."""

    config: TerrainConfig
    types: tuple[str, ...]  # [C] the type of each column
    heights: torch.Tensor  # [X, Y] heightfield samples (m)
    origin: tuple[float, float]  # world x, y of sample (0, 0)
    resolution: float
    centres: torch.Tensor  # [L, C, 2] world x, y of each tile's centre
    start_height: torch.Tensor  # [L, C] the terrain's highest point on each tile's platform (m)

    def to(self, device: torch.device, dtype: torch.dtype) -> TerrainTables:
        move = {name: getattr(self, name).to(device, dtype) for name in ("heights", "centres", "start_height")}
        return TerrainTables(**{**vars(self), **move})

    @property
    def extent(self) -> tuple[float, float]:
        """Side lengths (m) of the heightfield along x and y."""
        return (self.heights.shape[0] - 1) * self.resolution, (self.heights.shape[1] - 1) * self.resolution

    def height(self, xy: torch.Tensor) -> torch.Tensor:
        """Terrain height [...] under world points xy [..., 2] (outside the heightfield: its edge's height)."""
        res = self.resolution
        fx = (xy[..., 0] - self.origin[0]) / res
        fy = (xy[..., 1] - self.origin[1]) / res
        nx, ny = self.heights.shape
        ix = fx.floor().clamp(0, nx - 2)
        iy = fy.floor().clamp(0, ny - 2)
        tx, ty = (fx - ix).clamp(0.0, 1.0), (fy - iy).clamp(0.0, 1.0)
        ix, iy = ix.long(), iy.long()
        h00 = self.heights[ix, iy]
        h10 = self.heights[ix + 1, iy]
        h01 = self.heights[ix, iy + 1]
        h11 = self.heights[ix + 1, iy + 1]
        # MuJoCo's triangles: (x0 y0, x1 y0, x1 y1) where tx >= ty, (x0 y0, x1 y1, x0 y1) where tx < ty
        lower = h00 + tx * (h10 - h00) + ty * (h11 - h10)
        upper = h00 + ty * (h01 - h00) + tx * (h11 - h01)
        return torch.where(tx >= ty, lower, upper)


def build_terrain(config: TerrainConfig) -> tuple[_Builder, TerrainTables]:
    """The terrain's numbers (heights, boxes) and its lookup tables."""
    builder = _Builder(config)
    builder.build()
    heights = builder.heights
    res = config.resolution
    for box in builder.boxes:  # edges on sample lines: the samples on and inside them take the box's top
        i0 = round((box.x - box.hx - builder.x0) / res)
        i1 = round((box.x + box.hx - builder.x0) / res)
        j0 = round((box.y - box.hy - builder.y0) / res)
        j1 = round((box.y + box.hy - builder.y0) / res)
        heights[i0 : i1 + 1, j0 : j1 + 1] = np.maximum(heights[i0 : i1 + 1, j0 : j1 + 1], box.top)
    centres = np.zeros((config.levels, config.columns, 2))
    half = config.platform / 2
    for level in range(config.levels):
        for column in range(config.columns):
            centres[level, column] = builder._centre(level, column)
    tables = TerrainTables(
        config=config,
        types=tuple(builder.types),
        heights=torch.tensor(heights),
        origin=(builder.x0, builder.y0),
        resolution=res,
        centres=torch.tensor(centres),
        start_height=torch.zeros(config.levels, config.columns, dtype=torch.float64),
    )
    # the highest point of each platform (samples and cell centres on it): where a row's feet are put at a reset
    offsets = torch.arange(-half + res / 4, half, res / 2, dtype=torch.float64)  # inside the platform's edge
    grid = torch.stack(torch.meshgrid(offsets, offsets, indexing="ij"), dim=-1).reshape(-1, 2)  # [G, 2]
    points = torch.tensor(centres)[:, :, None, :] + grid  # [L, C, G, 2]
    object.__setattr__(tables, "start_height", tables.height(points).amax(dim=-1))
    return builder, tables


def add_terrain(spec: mujoco.MjSpec, config: TerrainConfig) -> TerrainTables:
    """The terrain's body and heightfield, added to ``spec`` (see the module doc)."""
    builder, tables = build_terrain(config)
    heights = builder.heights
    low, high = float(heights.min()), float(heights.max())
    span = max(high - low, 1e-3)
    nx, ny = heights.shape
    res = config.resolution
    spec.add_hfield(
        name=BODY,
        size=[(nx - 1) * res / 2, (ny - 1) * res / 2, span, _BASE],
        nrow=ny,  # MuJoCo's rows run along y, its columns along x
        ncol=nx,
        userdata=((heights.T - low) / span).astype(np.float32).reshape(-1).tolist(),
    )
    body = spec.worldbody.add_body(name=BODY)
    centre = [builder.x0 + (nx - 1) * res / 2, builder.y0 + (ny - 1) * res / 2]
    body.add_geom(
        name=f"{BODY}_hfield",
        type=mujoco.mjtGeom.mjGEOM_HFIELD,
        hfieldname=BODY,
        pos=[*centre, low],
        rgba=[0.45, 0.5, 0.55, 1.0],
        friction=[config.friction, 0.005, 0.0001],
        contype=1,
        conaffinity=1,
        condim=3,
    )
    return tables
