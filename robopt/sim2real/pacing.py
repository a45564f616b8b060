"""When the deploy loop's next tick starts: the clock's schedule, or in phase with the robot's measurements.

Standard library only. ``Pacer.wait()`` sleeps until the next tick may start (and, ticking on measurements, until a
new one arrives) and returns its start time; ``Pacer.ticked(start)`` schedules the one after. The loop never ticks
faster than its period, whatever the robot sends or stamps:
- ``tick_on: clock``: sleep to each deadline of a fixed schedule. A tick that starts more than LATE_SHARE of a
  period after its deadline counts ``late_ticks`` and the schedule restarts from it: no burst of catch-up ticks
  (``skipped_ticks``: the whole periods all late ticks lost together). A tick that ends past the next deadline
  counts ``missed_deadline``.
- ``tick_on: measurement``: from half a period after the last tick it looks every 0.5 ms for a measurement other
  than the last tick's (any other stamp, so a robot clock that jumps or restarts never stalls it) and ticks when
  one arrives, but never sooner than a period after the last tick (less JITTER_SHARE of a period where that tick
  overshot its own earliest time: no faster on average), nor later than 1.25 periods (without one: the stale
  check decides). A measurement already waiting when it starts to look came half a period or more before the
  tick: it ticks on it at the earliest, but after RELOCK_AFTER such ticks in a row (a lag that persists: the
  start, a late packet that shifted the phase) it waits for the next one, which brings the loop back in phase at
  the cost of one longer interval. A burst of measurements cannot make it tick sooner.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["JITTER_SHARE", "LATE_SHARE", "LOOK_SHARE", "POLL_S", "RELOCK_AFTER", "WAIT_SHARE", "Pacer"]

LOOK_SHARE = 0.5  # tick_on: measurement: look for a new measurement from this share of a period before a tick...
WAIT_SHARE = 0.25  # ...and wait for one at most this share of a period past it
POLL_S = 0.0005  # tick_on: measurement: seconds between looks for a new observation
RELOCK_AFTER = 3  # tick_on: measurement: after this many ticks in a row on measurements that came early, skip one
LATE_SHARE = 0.1  # a tick that starts more than this share of a period after it was due is late
JITTER_SHARE = 0.05  # tick_on: measurement: a tick this share of a period after its earliest time keeps the grid


class Pacer:
    """The tick schedule of one control loop (module doc).

    ``counters`` is the loop's dict: the pacer counts ``missed_deadline``, ``late_ticks`` and ``skipped_ticks`` in
    it. ``read_stamp()`` is the robot's latest measurement's stamp (None when the link or the stamp is broken);
    ``is_new(stamp)`` says whether it is another measurement than the last tick's.
    """

    def __init__(
        self,
        period: float,
        in_phase: bool,
        counters: dict[str, int],
        read_stamp: Callable[[], float | None],
        is_new: Callable[[float], bool],
    ) -> None:
        self.period, self.in_phase, self.counters = period, in_phase, counters
        self.read_stamp, self.is_new = read_stamp, is_new
        self.earliest = time.perf_counter()  # the next tick starts no sooner (a tick that stops reads it)
        self._wake = self._due = self.earliest  # look from wake; late past due
        self._lost_seconds = 0.0  # time late ticks lost to the schedule (skipped_ticks: whole periods of it)
        self._early_streak = 0  # ticks in a row on measurements that were waiting before the loop looked

    def start(self) -> float:
        """A run begins now: its first tick is due now (ticking on measurements, it waits up to WAIT_SHARE of a
        period for one). Returns now."""
        now = time.perf_counter()
        self._wake = self.earliest = self._due = now
        if self.in_phase:
            self._due += WAIT_SHARE * self.period
        return now

    def wait(self) -> float:
        """Sleep until the next tick may start; count it late if it starts past its due time; its start time."""
        wait = self._wake - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if self.in_phase:
            self._await_measurement()
        tick_start = time.perf_counter()
        lateness = tick_start - self._due
        if lateness > LATE_SHARE * self.period:  # a stall (GC, scheduler, a slow robot read)
            self.counters["late_ticks"] += 1
            self._lost_seconds += lateness  # the schedule restarts: the time is lost for good
            self.counters["skipped_ticks"] = int(self._lost_seconds // self.period)
        return tick_start

    def ticked(self, tick_start: float) -> None:
        """Schedule the tick after the one that started at ``tick_start`` (and has ended)."""
        period = self.period
        if self.in_phase:  # a period after this tick at the earliest, in phase with the robot; a tick close to its
            # earliest time keeps the grid (sleep overshoot does not add up into a lag)
            self.earliest = max(self.earliest + period, tick_start + (1.0 - JITTER_SHARE) * period)
            self._wake, self._due = self.earliest - LOOK_SHARE * period, self.earliest + WAIT_SHARE * period
        else:  # the fixed schedule; restarted from a late tick (no catch-up burst)
            late = tick_start - self._due > LATE_SHARE * period
            self._wake = self.earliest = self._due = (tick_start if late else self._due) + period
        if time.perf_counter() > tick_start + period:
            self.counters["missed_deadline"] += 1

    def _await_measurement(self) -> None:
        """Wait for a measurement to arrive while looking (one already waiting came early: the next one), then
        until ``earliest``; or until the due time."""
        earliest = self.earliest
        waiting = self.read_stamp()
        skip = None
        if waiting is not None and self.is_new(waiting):  # it came before the loop looked
            self._early_streak += 1
            if self._early_streak < RELOCK_AFTER:
                if (wait := earliest - time.perf_counter()) > 0:
                    time.sleep(wait)
                return
            skip, self._early_streak = waiting, 0  # the phase lags: wait for the next measurement to relock
        else:
            self._early_streak = 0
        while (now := time.perf_counter()) < self._due:
            stamp = self.read_stamp()
            if stamp is None:  # a broken link or a timestamp that is not a number: the tick counts it
                return
            if self.is_new(stamp) and stamp != skip:
                if now < earliest:
                    time.sleep(earliest - now)
                return
            time.sleep(POLL_S)
