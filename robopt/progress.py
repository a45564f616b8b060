"""Live training progress (rich): steps, steps/s and recent episode return."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainingProgress:
    """A progress bar over environment steps; a no-op when disabled."""

    def __init__(self, total_steps: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[ret]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            )  # fmt: skip
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
        ret = "return -" if episode_return is None else f"return {episode_return:9.1f}"
        self._progress.update(self._task, completed=steps, rate=f"{steps_per_second:7.0f} steps/s", ret=ret)
