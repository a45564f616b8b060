"""Run logging: TensorBoard events plus a ``progress.csv`` that ``robopt plot`` reads."""

from __future__ import annotations

import csv
from pathlib import Path


class RunLogger:
    """Writes scalar metrics per iteration to TensorBoard (``train/<name>``) and to progress.csv."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.run_dir = run_dir
        self.csv_path = run_dir / "progress.csv"
        self._columns: list[str] | None = None
        if self.csv_path.exists():  # resumed run: keep appending with the existing columns
            with self.csv_path.open() as handle:
                self._columns = next(csv.reader(handle), None)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir))

    def log(self, env_steps: int, metrics: dict[str, float]) -> None:
        row = {"env_steps": env_steps, **metrics}
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(f"train/{key}", value, env_steps)
        if self._columns is None:
            self._columns = ["env_steps", "episode_return", "episode_length", "wall_time"]
            self._columns += sorted(k for k in row if k not in self._columns)
            with self.csv_path.open("w", newline="") as handle:
                csv.writer(handle).writerow(self._columns)
        with self.csv_path.open("a", newline="") as handle:
            csv.writer(handle).writerow([row.get(column, "") for column in self._columns])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_progress(run_dir: Path) -> tuple[list[float], list[float]]:
    """(env_steps, episode_return) rows of a run's progress.csv that have a return."""
    steps, returns = [], []
    with (run_dir / "progress.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row.get("episode_return"):
                steps.append(float(row["env_steps"]))
                returns.append(float(row["episode_return"]))
    return steps, returns
