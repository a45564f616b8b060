"""Learning curves from run directories: return (or another logged metric) vs env steps, mean and min-max spread
over seeds."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from robopt.logging import read_progress
from robopt.options import ConfigError

X_AXES = {"env_steps": "environment steps", "wall_time": "wall time (s)"}


def plot_runs(
    run_dirs: list[Path],
    out: Path,
    points: int = 200,
    metric: str = "episode_return",
    labels: list[str] | None = None,
    x: str = "env_steps",
) -> dict[str, int]:
    """Group runs by experiment name (or ``labels``, one per run), interpolate each onto a common grid of ``x``
    (``env_steps`` or ``wall_time``), draw mean and spread of ``metric`` (a progress.csv column)."""
    if x not in X_AXES:
        raise ConfigError(f"--x {x!r} is not allowed; allowed: {', '.join(X_AXES)}")
    if labels is not None and len(labels) != len(run_dirs):
        raise ConfigError(f"{len(labels)} labels for {len(run_dirs)} runs: give one label per run, or none")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import yaml

    groups: dict[str, list[tuple[list[float], list[float]]]] = defaultdict(list)
    for index, run_dir in enumerate(run_dirs):
        if not (run_dir / "progress.csv").is_file() or not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"{str(run_dir)!r} is not a run directory with progress.csv and config.yaml")
        name = yaml.safe_load((run_dir / "config.yaml").read_text()).get("name", run_dir.parent.name)
        name = labels[index] if labels else name
        steps, returns = read_progress(run_dir, metric, x)
        if steps:
            groups[name].append((steps, returns))
    if not groups:
        raise ConfigError(f"none of the runs has logged {metric} yet; nothing to plot")
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, runs in sorted(groups.items()):
        end = min(run[0][-1] for run in runs)
        grid = np.linspace(min(run[0][0] for run in runs), end, points)
        curves = np.stack([np.interp(grid, steps, returns) for steps, returns in runs])
        mean = curves.mean(0)
        (line,) = axis.plot(grid, mean, label=f"{name} (n={len(runs)})")
        if len(runs) > 1:
            axis.fill_between(grid, curves.min(0), curves.max(0), color=line.get_color(), alpha=0.2)
    axis.set_xlabel(X_AXES[x])
    axis.set_ylabel(metric.replace("_", " "))
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return {name: len(runs) for name, runs in groups.items()}
