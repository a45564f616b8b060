"""Live training progress (rich): steps, steps/s and recent episode return, fitted to the terminal width."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

# Below this console width the elapsed-time column is dropped; the step counter is never cut.
_FULL_WIDTH = 96


class TrainingProgress:
    """A progress bar over environment steps; a no-op when disabled.

    The bar takes whatever width the text columns leave (at least 10 characters), so the step counter, rate
    and return stay whole in an 80-column terminal.
    """

    def __init__(self, total_steps: int, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self._progress = None
        if enabled:
            console = console or Console()
            digits = len(str(total_steps))
            columns = [
                TextColumn("[bold]train"),
                BarColumn(bar_width=None),
                TextColumn(f"{{task.completed:>{digits}.0f}}/{total_steps}"),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[ret]}"),
            ]
            if console.width >= _FULL_WIDTH:
                columns.append(TimeElapsedColumn())
            columns.append(TimeRemainingColumn())
            self._progress = Progress(*columns, console=console)
            self._task = self._progress.add_task("train", total=total_steps, rate="", ret="")

    def __enter__(self) -> TrainingProgress:
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def advance_to(self, steps: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=steps)

    def update(self, steps: int, steps_per_second: float, episode_return: float | None) -> None:
        if self._progress is None:
            return
        ret = "return -" if episode_return is None else f"return {episode_return:.1f}"
        self._progress.update(self._task, completed=steps, rate=f"{steps_per_second:.0f} steps/s", ret=ret)
