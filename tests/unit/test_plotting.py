"""``robopt plot``'s reading and drawing: the x axis (env steps or wall time), labels per run, one-line refusals."""

from __future__ import annotations

import pytest

from robopt.logging import read_progress
from robopt.options import ConfigError
from robopt.plotting import plot_runs


def run(tmp_path, name: str, rows: list[tuple[int, float, str]]):
    """A run directory whose progress.csv has (env_steps, wall_time, env/success) rows ('' = not logged)."""
    path = tmp_path / name
    path.mkdir()
    (path / "config.yaml").write_text(f"name: {name}\n")
    lines = ["env_steps,wall_time,env/success"] + [f"{s},{w},{v}" for s, w, v in rows]
    (path / "progress.csv").write_text("\n".join(lines) + "\n")
    return path


def test_rows_against_env_steps_or_wall_time(tmp_path):
    path = run(tmp_path, "a", [(100, 1.5, "0.25"), (200, 3.0, ""), (300, 4.5, "0.75")])
    assert read_progress(path, "env/success") == ([100.0, 300.0], [0.25, 0.75])  # rows without a value skipped
    assert read_progress(path, "env/success", x="wall_time") == ([1.5, 4.5], [0.25, 0.75])


def test_labels_group_runs_and_bad_input_is_one_line(tmp_path):
    first = run(tmp_path, "a", [(100, 1.0, "0.1"), (200, 2.0, "0.2")])
    second = run(tmp_path, "b", [(100, 1.5, "0.3"), (200, 2.5, "0.4")])
    groups = plot_runs(
        [first, second], tmp_path / "x.png", metric="env/success", labels=["dppo", "dppo"], x="wall_time"
    )
    assert groups == {"dppo": 2} and (tmp_path / "x.png").stat().st_size > 1000
    with pytest.raises(ConfigError, match=r"--x 'time' is not allowed; allowed: env_steps, wall_time"):
        plot_runs([first], tmp_path / "y.png", x="time")
    with pytest.raises(ConfigError, match=r"1 labels for 2 runs"):
        plot_runs([first, second], tmp_path / "y.png", labels=["one"])
