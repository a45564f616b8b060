"""Measurement stamps as the control loop sees them: which measurement is new, and which stamps are faults.

Standard library only. ``Stamps.check(obs_time, now, tick)`` per tick: a new measurement (another stamp than the
last tick's) whose stamp is not a finite number (``invalid``), lies more than ``future_tolerance`` ahead of the
runtime's clock (``future``) or goes back from the last sane one (``backward``: the robot's clock stepped back or
restarted) counts once in ``counters`` (``stamp_faults`` and ``stamp_<kind>``); the first of each kind is one line
in ``notices``. A fault never becomes the reference: the next sane stamp compares with the last sane one, so one bad
header costs one measurement, not the rest of the run.
"""

from __future__ import annotations

import math

__all__ = ["STAMP_FAULTS", "Stamps"]

STAMP_FAULTS = ("future", "backward", "invalid")


class Stamps:
    def __init__(self, future_tolerance: float, notices: list[str] | None = None) -> None:
        self.future_tolerance = future_tolerance
        self.last = math.nan  # the last tick's stamp (NaN: none yet)
        self.sane = math.nan  # the last stamp that was not a fault
        self.counters = {"stamp_faults": 0, **{f"stamp_{kind}": 0 for kind in STAMP_FAULTS}}
        self.notices = notices if notices is not None else []  # appended to (a caller's list, when given)

    def is_new(self, stamp: float) -> bool:
        """Another measurement than the last tick's (NaN: none yet, or no stamp to tell)."""
        return stamp != self.last and not math.isnan(stamp)

    def check(self, obs_time, now: float, tick: int) -> bool:
        """Record the stamp a tick acts on; whether it is sane (a fault counts once per measurement)."""
        try:
            stamp = float(obs_time)
        except Exception:  # noqa: BLE001 - no number
            stamp = math.nan
        new = stamp != self.last and not (math.isnan(stamp) and math.isnan(self.last))
        self.last = stamp
        if not math.isfinite(stamp):
            kind = "invalid"
        elif stamp > now + self.future_tolerance:
            kind = "future"
        elif stamp < self.sane:
            kind = "backward"
        else:
            self.sane = stamp
            return True
        if new:
            self.counters["stamp_faults"] += 1
            self.counters[f"stamp_{kind}"] += 1
            if self.counters[f"stamp_{kind}"] == 1:  # the first of each kind is a notice; the counters keep the rest
                detail = {
                    "future": f" ({stamp - now:.3g} s ahead of the runtime's clock)",
                    "backward": ", before the last sane one: the robot's clock went back or restarted",
                    "invalid": "",
                }[kind]
                self.notices.append(
                    f"tick {tick}: a measurement stamped {stamp!r}{detail}: stamp fault {kind!r} (counted as "
                    "stamp_faults; the safety layer judges its age)"
                )
        return False
