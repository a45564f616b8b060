"""The deploy runtime's tick log: the last ticks in a ring, saved as a structured ``.npy`` array (numpy only).

Fields per tick: tick, time [s], obs_age [s], compute_us, flags (``robopt.sim2real.safety`` bits), action [A].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["TickLog", "load_log"]


class TickLog:
    """The last ``capacity`` ticks in a ring: tick, time [s], obs_age [s], compute_us, flags, action [A]."""

    def __init__(self, capacity: int, action_dim: int) -> None:
        if capacity < 1:
            raise ValueError(f"log capacity must be >= 1 tick, got {capacity}")
        self.dtype = np.dtype(
            [
                ("tick", np.int64),
                ("time", np.float64),
                ("obs_age", np.float64),
                ("compute_us", np.float64),
                ("flags", np.int64),
                ("action", np.float32, (action_dim,)),
            ]
        )
        self._data = np.zeros(capacity, dtype=self.dtype)
        self.capacity, self.total = capacity, 0

    def append(self, tick: int, time: float, obs_age: float, compute_us: float, flags: int, action) -> None:
        self._data[self.total % self.capacity] = (tick, time, obs_age, compute_us, flags, action)
        self.total += 1

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def records(self) -> np.ndarray:
        """The kept ticks, oldest first (a copy)."""
        if self.total <= self.capacity:
            return self._data[: self.total].copy()
        start = self.total % self.capacity
        return np.concatenate([self._data[start:], self._data[:start]])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:  # a handle, so np.save keeps the name as given
            np.save(handle, self.records(), allow_pickle=False)
        return path


def load_log(path: str | Path) -> np.ndarray:
    """A tick log saved by ``TickLog.save`` (a structured array); ValueError when the file is not one."""
    try:
        records = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"{str(path)!r} is not a tick log ({str(error).splitlines()[0]})") from None
    if records.dtype.names is None or not {"tick", "time", "obs_age", "compute_us", "flags", "action"} <= set(
        records.dtype.names
    ):
        raise ValueError(f"{str(path)!r} is not a tick log (fields {records.dtype.names})")
    return records
