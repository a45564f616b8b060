"""Ends what an embedded Ray leaves behind when the process that started it dies (Linux; stdlib only).

Run as a script by path (``python reaper.py DRIVER_PID``, started by ``robopt.fleet.ray_runtime.start_reaper``) in a
session of its own. While the driver lives it notes, once a second, the driver's descendants (Ray's GCS, raylet,
dashboard and runtime-env agents, workers, the trials they run) with their start times. When the driver is gone
(this process was re-parented) it sends SIGTERM to those still alive, then SIGKILL after ``GRACE_S`` seconds (Ray's
agents ignore SIGTERM), and exits. A start time that differs means the pid was reused: that process is left alone.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 1.0
GRACE_S = 2.0


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
    except OSError:
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            children.setdefault(stat[0], []).append(int(name))
            started[int(name)] = stat[1]
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid in started and pid not in found:
            found[pid] = started[pid]
            todo += children.get(pid, [])
    return found


def end(processes: dict[int, int]) -> None:
    """SIGTERM to each recorded process still alive (same start time), SIGKILL to those left after GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [pid for pid, start in processes.items() if (stat := _stat(pid)) is not None and stat[1] == start]
        for pid in alive:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if not alive:
            return
        if sig == signal.SIGTERM:
            time.sleep(GRACE_S)


def main(driver: int) -> None:
    known: dict[int, int] = {}
    while os.getppid() == driver:
        known.update(descendants(driver))
        known.pop(os.getpid(), None)
        time.sleep(POLL_S)
    end(known)


if __name__ == "__main__":
    main(int(sys.argv[1]))
