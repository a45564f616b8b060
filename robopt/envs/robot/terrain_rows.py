"""Where each row (env) stands on the terrain (``robopt.envs.robot.terrain``), and the terrain curriculum.

Shapes: N envs, M rows being reset, L levels, C columns.

Row n walks the tiles of column ``n * C // N`` (the rows share the columns, and so the types, evenly). Its level is
drawn at its first reset (levels 0..``initial_level`` with the curriculum, every level without). At each later reset
that ends an episode, the curriculum (legged_gym's game-inspired rule, also Isaac Lab's ``terrain_levels_vel``) moves
it: a level up when the base walked more than half a tile from where it started, a level down when it walked less
than half the distance its velocity command asked for over a whole episode (|v_xy| * episode_s / 2); a row that
moves past the top level goes to a random level, so the top levels keep being visited without crowding. A reset
that does not end an episode (``env.reset``) keeps the levels. The rows start on their tile's central platform, at
its highest point. The levels, columns and starts are the task's state (an exact resume).
"""

from __future__ import annotations

import torch

from robopt.envs.robot.terrain import TerrainTables


class TerrainRows:
    """Each row's tile and start on the terrain, and the curriculum over levels (the module doc)."""

    def __init__(self, tables: TerrainTables, num_envs: int, episode_s: float) -> None:
        config = tables.config
        self.tables, self.episode_s = tables, episode_s
        self.num_levels, self.num_columns = config.levels, config.columns
        self.column = torch.arange(num_envs) * config.columns // num_envs  # [N] long
        self.level = torch.zeros(num_envs, dtype=torch.long)  # [N]
        self.started = torch.zeros(num_envs, dtype=torch.bool)  # [N] rows that have had an episode
        self.start = torch.zeros(num_envs, 2, dtype=torch.float64)  # [N, 2] world x, y where the episode began
        types = tables.types
        self._of_type = {  # the rows of each type present (their columns never change)
            name: torch.tensor([types[c] == name for c in self.column.tolist()]) for name in dict.fromkeys(types)
        }

    def place(
        self, rows: torch.Tensor, base_xy: torch.Tensor, command_speed: torch.Tensor, ended: bool, generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Levels of ``rows`` [M] (CPU long) moved by the curriculum (when their episodes ``ended``), from where the
        base is [M, 2] and the command's speed [M] (m/s); returns their tiles' centres [M, 2] and start heights [M]."""
        config = self.tables.config
        fresh = ~self.started[rows]
        if bool(fresh.any()):
            top = min(config.initial_level + 1, self.num_levels) if config.curriculum else self.num_levels
            self.level[rows[fresh]] = torch.randint(top, (int(fresh.sum()),), generator=generator)
        old = rows[~fresh]
        if config.curriculum and ended and old.numel() > 0:
            walked = (base_xy[~fresh].to(torch.float64) - self.start[old]).norm(dim=1)
            up = walked > config.tile / 2
            down = (walked < command_speed[~fresh].to(torch.float64) * self.episode_s * 0.5) & ~up
            level = self.level[old] + up.long() - down.long()
            past = level >= self.num_levels
            level = torch.where(past, torch.randint(self.num_levels, level.shape, generator=generator), level)
            self.level[old] = level.clamp(min=0)
        self.started[rows] = True
        level, column = self.level[rows], self.column[rows]
        centres = self.tables.centres.cpu()[level, column]
        return centres, self.tables.start_height.cpu()[level, column]

    def started_at(self, rows: torch.Tensor, xy: torch.Tensor) -> None:
        """Where the new episodes of ``rows`` begin (world x, y [M, 2]), for the curriculum's distance."""
        self.start[rows] = xy.to(torch.float64)

    def log(self) -> dict[str, torch.Tensor]:
        """The mean level (``terrain_level``) and its mean per type (``terrain_level/<type>``), in levels."""
        out = {"terrain_level": self.level.double().mean()}
        for name, rows in self._of_type.items():
            if bool(rows.any()):
                out[f"terrain_level/{name}"] = self.level[rows].double().mean()
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name).clone() for name in ("column", "level", "started", "start")}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            getattr(self, name).copy_(value)
