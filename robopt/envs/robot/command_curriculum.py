"""The command curriculum (``task.command_curriculum``): a velocity command's ranges widen as tracking succeeds.

Shapes: N envs, M rows being reset.

The command's ranges (``task.commands``) are the final ones; training starts with each range scaled by ``start``
(``[low * start, high * start]``). At every reset of rows whose episodes ended, the episodes' mean of the tracking
reward term ``reward`` (its unweighted value per control step, summed over the episode and divided by the time
limit's steps, so a fall counts as the steps it missed) is compared with ``threshold``: above it, the scale grows
by ``step`` (up to 1). This is legged_gym's ``update_command_curriculum`` (Rudin et al. 2022) and Isaac Lab's
``lin_vel_cmd_levels``, on a share of the final ranges rather than a fixed increment. The scale and each row's
running sum are the task's state (an exact resume; the command's ranges are saved with the command); the
scale is logged as ``command_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robopt.options import ConfigError, between, option

SHARE = between(0.0, 1.0, "a number in (0, 1]", low_open=True)


@dataclass(frozen=True)
class CommandCurriculumConfig:
    reward: str = option("", "the tracking reward term whose episode mean decides ('' = no curriculum)")
    start: float = option(0.5, "the share of the final ranges at the start", check=SHARE)
    step: float = option(0.1, "how much the share grows after a good set of episodes", check=SHARE)
    threshold: float = option(
        0.8, "the episode mean of the reward term (per step, in [0, 1]) that counts as good", check=SHARE
    )


class CommandCurriculum:
    """The share of the command's final ranges in use, and each row's running sum of the tracking term."""

    def __init__(self, config: CommandCurriculumConfig, command, num_envs: int, episode_steps: int, device) -> None:
        if command is None or "velocity" not in command.provides:
            raise ConfigError("task.command_curriculum needs a velocity command (task.commands.type: velocity)")
        self.config, self.command, self.episode_steps = config, command, episode_steps
        self.final = dict(command.ranges)
        self.scale = torch.tensor(float(config.start), dtype=torch.float64)
        self.sums = torch.zeros(num_envs, dtype=torch.float64, device=device)  # [N] this episode's term sum
        self._apply()

    def _apply(self) -> None:
        share = float(self.scale)
        self.command.ranges = {key: (low * share, high * share) for key, (low, high) in self.final.items()}

    def add(self, value: torch.Tensor) -> None:
        """This step's value of the tracking term [N] (unweighted)."""
        self.sums += value.to(self.sums)

    def ended(self, rows: torch.Tensor) -> None:
        """Episodes of ``rows`` [M] ended: widen the ranges if they tracked well, and restart their sums."""
        rows = rows.to(self.sums.device)
        mean = float(self.sums[rows].mean()) / self.episode_steps
        if mean > self.config.threshold and float(self.scale) < 1.0:
            self.scale = torch.clamp(self.scale + self.config.step, max=1.0)
            self._apply()
        self.sums[rows] = 0.0

    def restarted(self, rows: torch.Tensor) -> None:
        """Rows start over without an episode's end (``env.reset``): their sums restart, the scale stays."""
        self.sums[rows.to(self.sums.device)] = 0.0

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"scale": self.scale.clone(), "sums": self.sums.cpu().clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.scale = state["scale"].clone()
        self.sums.copy_(state["sums"])
        self._apply()
