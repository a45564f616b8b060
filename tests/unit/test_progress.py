"""The training progress bar keeps its step counter, rate and return whole in an 80-column terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from robopt.progress import TrainingProgress


def _rendered_line(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=True)
    with TrainingProgress(10_000_000, console=console) as bar:
        bar.update(100_352, 2148.0, -1234.5)
        table = bar._progress.make_tasks_table(bar._progress.tasks)
    out = Console(file=io.StringIO(), width=width, color_system=None)
    out.print(table)
    return out.file.getvalue().rstrip("\n")


@pytest.mark.parametrize("width", [80, 100, 160])
def test_counter_rate_and_return_fit_the_terminal(width: int) -> None:
    line = _rendered_line(width)
    assert len(line) <= width and "\n" not in line
    for text in ("100352/10000000", "2148 steps/s", "return -1234.5"):
        assert text in line, line
    assert "…" not in line  # nothing cut short


def test_disabled_progress_is_a_no_op() -> None:
    with TrainingProgress(100, enabled=False) as bar:
        bar.advance_to(10)
        bar.update(20, 1.0, None)
