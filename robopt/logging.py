"""Run logging: TensorBoard events plus a ``progress.csv`` that ``robopt plot`` reads."""

from __future__ import annotations

import csv
import os
from pathlib import Path


class RunLogger:
    """Writes scalar metrics per iteration to TensorBoard (``train/<name>``) and to progress.csv.

    ``resume_at_step``: the env steps of the checkpoint a run resumes from. Rows logged after it (by a process
    that crashed or was killed before its next checkpoint) are dropped from progress.csv and TensorBoard, so the
    resumed run's files read like one uninterrupted run.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_at_step: int | None = None) -> None:
        self.run_dir = run_dir
        self.csv_path = run_dir / "progress.csv"
        self._columns: list[str] | None = None
        if self.csv_path.exists():  # resumed run: keep appending with the existing columns
            self._columns = _truncate_csv(self.csv_path, resume_at_step)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: TensorBoard hides events at or after this step written before the restart
            purge_step = None if resume_at_step is None else resume_at_step + 1
            self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)

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
        added = sorted(key for key in row if key not in self._columns)
        if added:  # a metric that first appears now (e.g. the update's after a critic warm-up): widen the file
            self._columns = [*self._columns, *added]
            _widen_csv(self.csv_path, self._columns)
        with self.csv_path.open("a", newline="") as handle:
            csv.writer(handle).writerow([row.get(column, "") for column in self._columns])

    def log_summary(self, env_steps: int, metrics: dict[str, float]) -> None:
        """Scalars such as the final evaluation: TensorBoard only, so progress.csv keeps one row per iteration."""
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(f"eval/{key}", value, env_steps)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _widen_csv(path: Path, columns: list[str]) -> None:
    """Rewrite ``path`` with header ``columns`` (the old header is a prefix), padding old rows (atomically)."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    body = [row + [""] * (len(columns) - len(row)) for row in rows[1:]]
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as handle:
        csv.writer(handle).writerows([columns, *body])
    os.replace(tmp, path)


def _truncate_csv(path: Path, last_step: int | None) -> list[str] | None:
    """Drop rows with env_steps > ``last_step`` (atomically: temporary file, then rename); returns the header."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    if last_step is not None:
        step_column = header.index("env_steps")
        kept = [row for row in body if len(row) == len(header) and _step(row[step_column]) <= last_step]
        if len(kept) != len(body):
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            with tmp.open("w", newline="") as handle:
                csv.writer(handle).writerows([header, *kept])
            os.replace(tmp, path)
    return header


def _step(value: str) -> float:
    """A row's env_steps; an unreadable one (a row cut short by a crash) counts as past any checkpoint."""
    try:
        return float(value)
    except ValueError:
        return float("inf")


def read_progress(
    run_dir: Path, metric: str = "episode_return", x: str = "env_steps"
) -> tuple[list[float], list[float]]:
    """(x, metric) rows of a run's progress.csv that have a value of ``metric`` (default: the return); ``x`` is
    ``env_steps`` or another column, such as ``wall_time`` (s)."""
    steps, values = [], []
    with (run_dir / "progress.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row.get(metric) and row.get(x):
                steps.append(float(row[x]))
                values.append(float(row[metric]))
    return steps, values
